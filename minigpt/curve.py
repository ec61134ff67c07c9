"""Name the shape of a loss curve. Pure Python (no torch, rich or textual). Reading and following
`logs/metrics.jsonl` lives in `minigpt.metrics_log` (re-exported here).

Diagnosis (`diagnose`). The train series is split into blocks of B = clamp(n // 20, 1, 50)
consecutive points (the last block takes the remainder); each block's median is the smoothed
loss, so minibatch noise neither hides nor fakes a trend. "start"/"end" are the medians of the
first/last 10% of the points (at least 3). Rules, first match wins (diverged > too_short > flat >
overfitting > spikes > plateau > healthy):

- diverged: any non-finite train or val loss, or a non-finite gradient norm on the last line
  (the trainer stops there). Reports the first such step and the learning rate at it.
- too_short: fewer than MIN_POINTS (5) finite train losses.
- flat: (start - end) < FLAT_REL_DROP (2%) of |start| (a loss that rose lands here too, with
  "learning rate too high" as first cause); or, with `baseline` (log V, the loss of a
  uniform guess), end >= baseline - FLAT_BASELINE_MARGIN (0.05 nats: the model never beat
  guessing; 0.05 rather than 0.02 so a noisy block median at log V still counts).
- overfitting: at least 3 finite val losses, the best one before the last, and either the last
  OVERFIT_RISES (3) evals each rose (by OVERFIT_MIN_RISE, 0.01 nats, in total) or the last is
  above the best by max(0.02, 2% of best); while train kept falling (the end median is at least
  OVERFIT_TRAIN_DROP, 0.5%, below the train level at the best-val step). Reports the gap
  val - train at the end.
- spikes: the train series is cut into blocks of clamp(n // 10, 3, 50) points; a point is a
  spike when it lies above the median of the block before it by more than
  max(SPIKE_MIN_JUMP (0.5 nats), SPIKE_MADS (8) x scale), scale = the median of the MADs of the
  up to 4 blocks before (8 MADs ~ 5.4 sigma of Gaussian noise). Comparing with earlier points
  only means a falling trend never looks like a spike. The first block (initial drop, warmup)
  is not checked. With `baseline`, a later block whose median is above baseline + 0.5 (worse
  than guessing: a blow-up the run may have half recovered from) is a spike too. Consecutive
  spike points are one spike, reported at its peak.
- plateau: a least-squares line through the last PLATEAU_TAIL (30%) of the steps falls by less
  than PLATEAU_REL (1%) of the loss, and its standard error is below 1% too. With noisy
  minibatch losses (std ~0.1, a few dozen points) the slope cannot resolve 1%: such a run is
  called healthy and the summary says it is too noisy to tell. We cannot know the achievable
  loss, so a converged run also lands here: the causes say what to try.
- healthy: none of the above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .metrics_log import (  # noqa: F401  (re-exported)
    MetricPoint,
    MetricsFollower,
    MetricsLog,
    downsample,
    parse_line,
    read_metrics,
    series,
)

MIN_POINTS = 5
FLAT_REL_DROP = 0.02
FLAT_BASELINE_MARGIN = 0.05
OVERFIT_RISES = 3
OVERFIT_MIN_RISE = 0.01
OVERFIT_MARGIN_ABS, OVERFIT_MARGIN_REL = 0.02, 0.02
OVERFIT_TRAIN_DROP = 0.005
SPIKE_MIN_JUMP = 0.5
SPIKE_MIN_BLOCK, SPIKE_SCALE_BLOCKS = 3, 4
SPIKE_MADS = 8.0  # 8 MADs ~ 5.4 sigma of Gaussian noise; 5 MADs (3.4 sigma) fires on noise in long runs
PLATEAU_TAIL = 0.30
PLATEAU_REL = 0.01
VALUE_KEYS = (
    "first_step",
    "last_step",
    "n_train_points",
    "n_val_points",
    "first_train_loss",
    "last_train_loss",
    "min_train_loss",
    "start_train_loss",
    "end_train_loss",
    "relative_drop",
    "last_val_loss",
    "best_val_loss",
    "best_val_step",
    "train_perplexity",
    "val_perplexity",
    "generalisation_gap",
    "spike_steps",
    "first_nonfinite_step",
    "nonfinite_what",
    "lr_at_instability",
    "recent_improvement",
    "recent_improvement_se",
    "plateau_start_step",
    "lr_at_plateau_start",
    "baseline",
)


@dataclass
class CurveDiagnosis:
    shape: str  # healthy | flat | spikes | plateau | overfitting | diverged | too_short
    summary: str  # one line in words
    values: dict = field(default_factory=dict)  # the numbers the rules used (see `diagnose`)
    causes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)


_ADVICE = {
    "healthy": ([], []),
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


def _median(seg: list[float]) -> float:
    s = sorted(seg)
    k = len(s)
    return (s[(k - 1) // 2] + s[k // 2]) / 2


def _perplexity(loss: float | None) -> float | None:
    if loss is None:
        return None
    return math.exp(loss) if loss < 700 else float("inf")  # exp overflows past ~709


def _lr_at(points: list[MetricPoint], index: int) -> float | None:
    for p in reversed(points[: index + 1]):  # this line's lr, else the last one logged before it
        if p.lr is not None:
            return p.lr
    return None


def _fmt_steps(steps: list[int], limit: int = 5) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f" and {len(steps) - limit} more" if len(steps) > limit else "")


def _result(shape: str, summary: str, values: dict) -> CurveDiagnosis:
    causes, fixes = _ADVICE[shape]
    return CurveDiagnosis(shape, summary, values, list(causes), list(fixes))


def _tail_improvement(xs, ys) -> tuple[float, float]:
    """Relative drop of the least-squares line across the tail, and its standard error."""
    m = len(xs)
    mx, my = sum(xs) / m, sum(ys) / m
    sxx = sum((x - mx) ** 2 for x in xs)
    if m < 3 or sxx == 0 or my == 0:
        return 0.0, math.inf
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    resid = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, ys)) / (m - 2)
    span = (xs[-1] - xs[0]) / abs(my)
    return -slope * span, math.sqrt(resid / sxx) * span


def _bounds(n: int, size: int) -> list[tuple[int, int]]:
    """Blocks of `size` consecutive indices; the last one takes the remainder."""
    nb = max(1, n // size)
    return [(b * size, (b + 1) * size if b < nb - 1 else n) for b in range(nb)]


def _spike_indices(ys: list[float], baseline: float | None) -> list[int]:
    """Indices more than max(SPIKE_MIN_JUMP, SPIKE_MADS * scale) above the previous block's median,
    scale = the median of the MADs of the blocks before (one 50-point MAD is too noisy alone)."""
    bounds = _bounds(len(ys), max(SPIKE_MIN_BLOCK, min(50, len(ys) // 10)))
    meds = [_median(ys[a:z]) for a, z in bounds]
    mads: dict[int, float] = {}

    def mad(b: int) -> float:
        if b not in mads:
            a, z = bounds[b]
            mads[b] = _median([abs(y - meds[b]) for y in ys[a:z]])
        return mads[b]

    out: list[int] = []
    for b in range(1, len(bounds)):
        a, z = bounds[b]
        if baseline is not None and meds[b] > baseline + SPIKE_MIN_JUMP:  # worse than guessing
            out.extend(i for i in range(a, z) if ys[i] > baseline + SPIKE_MIN_JUMP)
            continue
        if max(ys[a:z]) <= meds[b - 1] + SPIKE_MIN_JUMP:
            continue  # the common case: no MAD needed
        scale = _median([mad(k) for k in range(max(0, b - SPIKE_SCALE_BLOCKS), b)])
        limit = meds[b - 1] + max(SPIKE_MIN_JUMP, SPIKE_MADS * scale)
        out.extend(i for i in range(a, z) if ys[i] > limit)
    return out


def diagnose(points: list[MetricPoint], *, baseline: float | None = None) -> CurveDiagnosis:
    """Name the shape of a training curve by the rules in the module docstring.

    `values` holds every key of VALUE_KEYS, None where a rule did not get that far; losses are
    over finite values, start/end_train_loss are block medians, `*_perplexity` = e**loss of the
    end train and last val loss, generalisation_gap = last val - end train."""
    by_step = {p.step: p for p in points}  # a rerun step keeps its last line
    pts = [by_step[s] for s in sorted(by_step)]
    v: dict = dict.fromkeys(VALUE_KEYS)
    v.update(baseline=baseline, spike_steps=[], n_train_points=0, n_val_points=0)
    finite_train = [p.train_loss for p in pts if p.train_loss is not None and math.isfinite(p.train_loss)]
    vals = [(p.step, p.val_loss) for p in pts if p.val_loss is not None and math.isfinite(p.val_loss)]
    if pts:
        v.update(first_step=pts[0].step, last_step=pts[-1].step)
    if finite_train:
        v.update(
            first_train_loss=finite_train[0],
            last_train_loss=finite_train[-1],
            min_train_loss=min(finite_train),
            n_train_points=len(finite_train),
        )
    if vals:
        best_step, best_val = min(vals, key=lambda sv: sv[1])
        v.update(
            last_val_loss=vals[-1][1],
            val_perplexity=_perplexity(vals[-1][1]),
            best_val_loss=best_val,
            best_val_step=best_step,
            n_val_points=len(vals),
        )

    # diverged
    for i, p in enumerate(pts):
        bad = [
            name
            for name in ("train_loss", "val_loss")
            if getattr(p, name) is not None and not math.isfinite(getattr(p, name))
        ]
        if not bad and i == len(pts) - 1 and p.grad_norm is not None and not math.isfinite(p.grad_norm):
            bad = ["grad_norm"]
        if bad:
            lr = _lr_at(pts, i)
            v.update(first_nonfinite_step=p.step, nonfinite_what=bad[0], lr_at_instability=lr)
            value = getattr(p, bad[0])
            lr_text = f" (learning rate {lr:.3g})" if lr is not None else ""
            return _result(
                "diverged", f"diverged: {bad[0].replace('_', ' ')} became {value} at step {p.step}{lr_text}", v
            )

    train = [(i, p.step, p.train_loss) for i, p in enumerate(pts) if p.train_loss is not None]
    n, last_val = len(train), v["last_val_loss"]
    if n < MIN_POINTS:
        return _result(
            "too_short", f"too short: {n} train loss value(s); need at least {MIN_POINTS} to judge the curve", v
        )

    ys = [t[2] for t in train]
    steps = [t[1] for t in train]
    bounds = _bounds(n, max(1, min(50, n // 20)))
    nb = len(bounds)
    meds = [_median(ys[a:z]) for a, z in bounds]
    edge = max(3, n // 10)
    start, end = _median(ys[:edge]), _median(ys[-edge:])
    drop = (start - end) / abs(start) if start else 0.0
    v.update(
        start_train_loss=start,
        end_train_loss=end,
        relative_drop=drop,
        train_perplexity=_perplexity(end),
        generalisation_gap=None if last_val is None else last_val - end,
    )

    # flat
    span = f"{steps[-1] - steps[0]} steps"
    if drop < FLAT_REL_DROP:
        lrs = {p.lr for p in pts if p.lr is not None}
        d = _result(
            "flat", f"flat: train loss went from {start:.3f} to {end:.3f} over {span} ({100 * drop:.1f}% lower)", v
        )
        if end > start + max(OVERFIT_MARGIN_ABS, FLAT_REL_DROP * abs(start)):
            d.causes.insert(0, "learning rate too high (the loss rose)")
        if lrs == {0.0}:
            d.causes.insert(0, "the learning rate is 0 for the whole run")
        return d
    if baseline is not None and end >= baseline - FLAT_BASELINE_MARGIN:
        return _result(
            "flat", f"flat: train loss {end:.3f} is no better than a uniform guess ({baseline:.3f}) after {span}", v
        )

    def train_level_at(step: int) -> float:
        b = min(range(nb), key=lambda k: abs(steps[(bounds[k][0] + bounds[k][1] - 1) // 2] - step))
        return meds[b]

    # overfitting
    if len(vals) >= 3 and vals[-1][0] != best_step:
        tail = [val for _, val in vals[-(OVERFIT_RISES + 1) :]]
        rising = (
            len(tail) == OVERFIT_RISES + 1
            and all(b > a for a, b in zip(tail, tail[1:]))
            and tail[-1] - tail[0] >= OVERFIT_MIN_RISE
        )
        above = last_val >= best_val + max(OVERFIT_MARGIN_ABS, OVERFIT_MARGIN_REL * abs(best_val))
        train_then = train_level_at(best_step)
        if (rising or above) and end <= train_then - OVERFIT_TRAIN_DROP * abs(train_then):
            return _result(
                "overfitting",
                f"overfitting: val loss rose from {best_val:.3f} (step {best_step}) "
                f"to {last_val:.3f} while train fell to {end:.3f}; gap {last_val - end:.3f}",
                v,
            )

    spike_idx = _spike_indices(ys, baseline)
    if spike_idx:
        clusters: list[list[int]] = [[spike_idx[0]]]
        for i in spike_idx[1:]:
            (clusters[-1].append(i) if i == clusters[-1][-1] + 1 else clusters.append([i]))
        spike_steps = [steps[max(c, key=lambda i: ys[i])] for c in clusters]
        lr = _lr_at(pts, train[clusters[0][0]][0])
        v.update(spike_steps=spike_steps, lr_at_instability=lr)
        lr_text = f"; learning rate {lr:.3g} at the first" if lr is not None else ""
        return _result(
            "spikes", f"spikes: {len(spike_steps)} loss spike(s) at step(s) {_fmt_steps(spike_steps)}{lr_text}", v
        )

    # plateau: least-squares slope over the tail; its standard error says whether noise allows a verdict
    tail_from = steps[0] + (1 - PLATEAU_TAIL) * (steps[-1] - steps[0])
    tx, ty = zip(*[(x, y) for x, y in zip(steps, ys) if x >= tail_from])
    recent, noise = _tail_improvement(tx, ty)
    v.update(recent_improvement=recent, recent_improvement_se=noise)
    if recent < PLATEAU_REL and noise < PLATEAU_REL:
        first = next(b for b in range(nb) if meds[b] <= end + PLATEAU_REL * abs(end))
        plateau_step = steps[bounds[first][0]]
        lr = _lr_at(pts, train[bounds[first][0]][0])
        v.update(plateau_start_step=plateau_step, lr_at_plateau_start=lr)
        return _result(
            "plateau",
            f"plateau: train loss has stayed near {end:.3f} since step {plateau_step} "
            f"({100 * recent:+.1f}% over the last {PLATEAU_TAIL:.0%} of the run)",
            v,
        )

    gap = "" if last_val is None else f", val {last_val:.3f} (gap {last_val - end:+.3f})"
    trend = (
        f"still improving ({100 * recent:.1f}% over the last {PLATEAU_TAIL:.0%})"
        if noise < PLATEAU_REL or recent > 2 * noise
        else "too few points to tell whether it still improves"
        if not math.isfinite(noise)
        else f"too noisy to tell whether it still improves ({100 * recent:+.1f}% +- {100 * noise:.1f}%)"
    )
    return _result("healthy", f"healthy: train loss {start:.3f} -> {end:.3f} over {span}{gap}; {trend}", v)
