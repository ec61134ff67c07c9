"""What to say about each shape of a loss curve: its likely causes and what to try (`advice`), a
diagnosis made with them and the words that quote the curve's ends (`diagnosis`, `first_words`,
`last_words`), and that advice kept to what the run does not already do, read from its own settings
(`RunSettings`, `fit_to_settings`). The rules that name the shape are in `curve_rules` and `curve_levels`."""

from __future__ import annotations

from dataclasses import dataclass

from minigpt.logs.curve import CurveDiagnosis, fmt_loss
from minigpt.logs.curve_series import Curve

ADVICE: dict[str, tuple[list[str], list[str]]] = {
    "healthy": ([], []),
    "still_improving": (
        ["the run ended while the loss was still falling (too few steps for this learning rate)"],
        [
            "train longer: `minigpt train --resume --steps N` with a larger N",
            "if the loss fell only once the learning rate decayed, the peak rate is too high: compare a 3x lower one",
        ],
    ),
    "too_short": (
        ["the run has just started", "the log interval is large compared with the run"],
        ["wait for more steps", "log more often (smaller log_interval)"],
    ),
    "flat": (
        [
            "learning rate too low or zero",
            "parameters frozen or missing from the optimizer",
            "data or targets wrong (targets not the inputs shifted by one)",
            "loss not connected to the parameters (a detached tensor)",
        ],
        [
            "raise the learning rate (AdamW: try 3e-4 to 1e-3)",
            "check every parameter requires grad and is in the optimizer",
            "run the data checks (targets = inputs shifted by one)",
            "overfit a single batch: the loss should fall towards 0 within a few hundred steps",
        ],
    ),
    "unstable": (
        [
            "learning rate too high (the loss rose)",
            "no warmup or too short a warmup",
            "no gradient clipping",
            "bad data (a corrupt batch) or a loss computed on the wrong targets",
        ],
        [
            "lower the learning rate 3-10x",
            "clip gradients at 1.0",
            "add warmup (a few hundred steps)",
            "resume from the last checkpoint saved before the rise",
        ],
    ),
    "scaled_loss": (
        [
            "the logged train loss is divided by the gradient-accumulation count: the loss scaled for backward() "
            "was logged",
            "the train and val losses are reduced differently (a sum over tokens or micro-batches on one side, "
            "a mean on the other)",
        ],
        [
            "log the unscaled loss (`loss.item() * grad_accum`, or log before dividing)",
            "compute train and val losses with the same reduction (the mean over tokens)",
            "until then read the val curve: the train curve's levels are off by that factor",
        ],
    ),
    "oscillating": (
        [
            "learning rate too high: the weights swing about a level instead of settling",
            "a validation loss averaged over very few batches (under about 12) swings this much by sampling alone",
        ],
        [
            "lower the learning rate 3x and compare the curves",
            "find the rate on your model: minigpt check --lr-probe (short runs at LR/10 to 3xLR)",
            "a longer warmup, or decay the learning rate",
        ],
    ),
    "too_good": (
        [
            "the targets leak into the inputs: targets not shifted by one (y = x), or a mask that lets position "
            "t see t+1, so the model copies the answer",
            "the evaluation data is in the training data (the same text, or overlapping windows)",
        ],
        [
            "check the loop: y = x[:, 1:] against x[:, :-1] (on a watched loop, minigpt check runs "
            "loop_targets_shifted)",
            "check the mask: minigpt check --model FILE:CLASS runs causal_independence",
            "check the splits: minigpt check runs split_overlap",
        ],
    ),
    "barely_learned": (
        [
            "learning rate too low: the loss fell slowly and steadily for the whole run",
            "far too few steps for this learning rate",
        ],
        [
            "raise the learning rate 3-10x",
            "find the rate on your model: minigpt check --lr-probe (short runs at LR/10 to 3xLR)",
            "then train longer if the loss still falls at the end",
        ],
    ),
    "overfitting": (
        ["too little data for the model size", "too many steps", "too little regularisation"],
        [
            "use the best checkpoint (lowest val loss), not the last",
            "stop training earlier",
            "add dropout (0.1-0.2) or more weight decay",
            "more data or a smaller model",
        ],
    ),
    "spikes": (
        [
            "learning rate too high",
            "no warmup or too short a warmup",
            "no gradient clipping",
            "bad batches (unusual or corrupt data)",
        ],
        [
            "lower the learning rate (by 2-3x)",
            "add warmup (a few hundred steps)",
            "clip gradients at 1.0",
            "look at the batches at the spike steps",
        ],
    ),
    "plateau": (
        [
            "learning rate decayed too early or too low",
            "model too small for the data",
            "data exhausted (many epochs over a small corpus)",
        ],
        [
            "lengthen the schedule or raise the minimum learning rate",
            "a bigger model (more layers or a wider embedding)",
            "more data",
            "train longer only while val loss still falls",
        ],
    ),
    "diverged": (
        ["learning rate too high", "fp16 overflow", "missing gradient clipping", "bad data (a corrupt batch)"],
        [
            "lower the learning rate and add warmup",
            "clip gradients at 1.0",
            "use bf16 or fp32 instead of fp16",
            "resume from the last good checkpoint",
        ],
    ),
}


def advice(shape: str) -> tuple[list[str], list[str]]:
    """Fresh copies of the shape's (causes, fixes): a diagnosis may edit its own."""
    causes, fixes = ADVICE[shape]
    return list(causes), list(fixes)


def diagnosis(shape: str, summary: str, c: Curve) -> CurveDiagnosis:
    """A diagnosis of `c` with the shape's own advice (fresh copies: a rule may edit its own)."""
    causes, fixes = advice(shape)
    return CurveDiagnosis(shape, summary, c.values, causes, fixes)


def first_words(c: Curve) -> str:
    """The first logged train loss, next to the median the rules read: "first 4.5 (median of the first 3: 4.4)"."""
    return f"first {fmt_loss(c.ys[0])} (median of the first {c.edge}: {fmt_loss(c.start)})"


def last_words(c: Curve) -> str:
    """The last logged train loss (what the Loss pane shows), next to the median the rules read."""
    return f"last {fmt_loss(c.ys[-1])} (median of the last {c.edge}: {fmt_loss(c.end)})"


@dataclass(frozen=True)
class RunSettings:
    """What the run's own files say about how it trained (its checkpoint's training settings)."""

    source: str  # in words, e.g. "the checkpoint's train_config"
    learning_rate: float | None = None
    grad_clip: float | None = None  # max gradient norm; 0 or None: not clipped
    batch_size: int | None = None  # sequences per micro-batch
    weight_decay: float | None = None
    beta2: float | None = None
    clip_source: str | None = None  # where grad_clip was read, when not `source` (the watch measured it)
    warmup_steps: int | None = None  # steps the LR rose before its peak, as the watch measured it (0: none)

    @classmethod
    def from_checkpoint(cls, raw: dict) -> RunSettings | None:
        """The training settings a checkpoint carries (minigpt's `train_config`, an imported nanoGPT
        run's whole `config`, a nanoGPT ckpt.pt's own); None when it carries none."""
        imported = raw.get("imported_from")
        if isinstance(raw.get("train_config"), dict):
            settings, source = raw["train_config"], "the checkpoint's train_config"
        elif isinstance(imported, dict) and isinstance(imported.get("config"), dict):
            settings, source = imported["config"], f"the {imported.get('format', 'imported')} run's config"
        elif isinstance(raw.get("nanogpt_config"), dict):  # a nanoGPT ckpt.pt opened as it is
            settings, source = raw["nanogpt_config"], "the nanoGPT checkpoint's config"
        else:
            return None

        def number(key: str) -> float | None:
            value = settings.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

        batch = number("batch_size")
        return cls(
            source,
            learning_rate=number("learning_rate"),
            grad_clip=number("grad_clip"),
            batch_size=int(batch) if batch is not None and batch >= 1 else None,
            weight_decay=number("weight_decay"),
            beta2=number("beta2"),
        )


# advice that a run which clipped its gradients already follows
_CLIP_WORDS = ("gradient clipping", "clip gradients")


def fit_to_settings(d: CurveDiagnosis, settings: RunSettings) -> None:
    """Never suggest what the run already does; name the LR its settings give when the log has none."""
    if settings.grad_clip:
        before = len(d.causes) + len(d.fixes)
        d.causes = [x for x in d.causes if not any(w in x for w in _CLIP_WORDS)]
        d.fixes = [x for x in d.fixes if not any(w in x for w in _CLIP_WORDS)]
        if len(d.causes) + len(d.fixes) < before:
            d.causes.append(
                f"the run clipped gradients at {settings.grad_clip:.3g} ({settings.clip_source or settings.source}): "
                "clipping alone did not hold it"
            )
    if settings.warmup_steps is not None:  # measured: the warmup advice names what the run did
        n = settings.warmup_steps
        did = (
            f"a warmup of {n} steps (the watch measured the LR)"
            if n
            else "no warmup (the watch saw the LR start at its peak)"
        )
        d.causes = [did if c == "no warmup or too short a warmup" else c for c in d.causes]
        longer = f"a warmup longer than {n} steps (a few hundred)" if n else "add warmup (a few hundred steps)"
        d.fixes = [longer if f == "add warmup (a few hundred steps)" else f for f in d.fixes]
    if settings.learning_rate and not d.values.get("peak_lr") and d.shape in ("unstable", "spikes", "diverged"):
        lr = settings.learning_rate
        d.fixes = [
            f"lower the learning rate 3-10x (lr {lr:.3g} in {settings.source}: try {lr / 10:.2g} to {lr / 3:.2g})"
            if f.startswith("lower the learning rate")
            else f
            for f in d.fixes
        ]
