"""The learning-rate probe: short runs that change only the learning rate.

A learning rate too high for the model does not always diverge: it can settle on a plateau well
above what the model reaches at a lower rate, and every curve rule then reads a healthy, flat
curve. The only way to see that is the experiment the debugging guide prescribes: train fresh
copies of the run's own model, from the run's config, on the run's own data, for a short fixed
budget at LR/10, LR/3, LR and 3xLR, everything else equal (same initial weights, same batches,
same dropout draws, the run's batch size, weight decay, beta2 and clipping), and compare their
validation losses.

Reading it: short runs favour the larger rates (a larger step goes further in few steps), so a
*lower* rate that ends clearly better is strong evidence the run's rate is too high. A larger rate
that ends better is weaker evidence the run's rate is too low (a long run with a decaying schedule
may still catch up): a warning that says so, unless the best rate is 10x or more above the run's and
far ahead, which fails. When the best rate is the highest (or lowest) probed and beat its neighbour,
the probe goes on one rate at a time along `LADDER` (10x, 30x, 100x; LR/30, LR/100) while each wins,
so the advice names the rate it measured. Opt-in (`--lr-probe`): it trains four models or more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from minigpt.checks import adapter
from minigpt.checks.adamw import AdamW
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check, when_blocked
from minigpt.checks.result import Outcome, Status
from minigpt.errors import MiniGPTError

Batch = tuple[torch.Tensor, torch.Tensor]  # (inputs, targets), each (B, T)

FACTORS = (0.1, 1 / 3, 1.0, 3.0)
# where the best of FACTORS is at an end and beat its neighbour, the probe goes on along this ladder
# (one rate at a time, while each goes on winning): a rate 100x off is measured, not guessed at 3x
LADDER = (0.01, 0.03, 0.1, 1 / 3, 1.0, 3.0, 10.0, 30.0, 100.0)
LADDER_NAMES = ("LR/100", "LR/30", "LR/10", "LR/3", "LR", "3xLR", "10xLR", "30xLR", "100xLR")
OFF_FACTOR = 10.0  # a best rate this far from the run's, winning by FAIL_NATS, fails in either direction
MAX_BATCH = 32  # the run's batch size, capped: the probe's cost is 4 x steps x one step
EVAL_BATCHES = 4
EVALS = 5  # validation losses per probe run (the last two are averaged for the verdict)
# a lower rate must beat the run's by this much (nats, or this fraction of its loss) to call it too high
MARGIN_NATS, MARGIN_FRACTION = 0.03, 0.02
FAIL_NATS = 0.15  # ... and by this much to make it a failure instead of a warning
LOW_NATS, LOW_FRACTION = 0.10, 0.05  # a larger rate must win by this much to say "too low"
LEARNED_FRACTION = 0.9  # the best probe must end below this fraction of log(V), or nothing was learned
MAX_PROJECTED_S = 900.0  # a probe projected to take longer is skipped, saying how to shorten it


@dataclass(frozen=True)
class ProbeRun:
    factor: float
    lr: float
    steps: list[int]  # steps at which the validation loss was measured
    val_losses: list[float]  # nan where the run diverged
    score: float  # mean of the last two validation losses; inf when non-finite
    diverged_at: int | None


def run_learning_rate(ctx: CheckContext) -> tuple[float | None, str]:
    """The run's learning rate and where it came from: --lr, the checkpoint's settings, the log's peak."""
    if ctx.options.run_learning_rate is not None:
        return float(ctx.options.run_learning_rate), "--lr"
    settings = ctx.run_settings()
    if settings is not None and settings.learning_rate:
        return settings.learning_rate, settings.source
    peak = _log_peak_lr(ctx)
    if peak is not None:
        return peak, f"the peak lr in {ctx.inputs.metrics}"
    return None, ""


def _log_peak_lr(ctx: CheckContext) -> float | None:
    from minigpt.logs.sources import read_run_metrics

    path = ctx.inputs.metrics
    try:
        if not path.exists():
            return None
        log = read_run_metrics(path)
    except MiniGPTError:
        return None  # training_curve names an unreadable log
    lrs = [p.lr for p in log.points if p.lr is not None and math.isfinite(p.lr) and p.lr > 0]
    return max(lrs) if lrs else None


def _optimizers(model: torch.nn.Module, lr: float, weight_decay: float, beta2: float) -> list[AdamW]:
    """AdamW as the trainer builds it: weight decay on matrices, none on biases, norms and gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    betas = (0.9, beta2)
    return [
        AdamW(group, lr=lr, betas=betas, weight_decay=wd) for group, wd in ((decay, weight_decay), (rest, 0.0)) if group
    ]


def _lr_at(step: int, steps: int, lr: float) -> float:
    """Linear warm-up over the first tenth of the budget, then constant: no decay, so the rates
    are compared as they are, not as a schedule softens them."""
    warmup = max(1, steps // 10)
    return lr * min(1.0, (step + 1) / warmup)


@torch.no_grad()
def _val_loss(model: torch.nn.Module, batches: list[Batch]) -> float:
    model.eval()
    losses = [adapter.call_with_loss(model, x, y)[1].float() for x, y in batches]
    model.train()
    return torch.stack(losses).mean().item()


def _probe_one(
    ctx: CheckContext,
    run: CheckRun,
    cfg: dict,
    factor: float,
    lr: float,
    steps: int,
    batch: Callable[[int], Batch],
    val_batches: list[Batch],
    clip: float,
    wd: float,
    beta2: float,
    done: int,
    total: int,
) -> ProbeRun:
    model = ctx.build_model(cfg, seed=ctx.options.seed).train()
    opts = _optimizers(model, lr * factor, wd, beta2)
    params = [p for o in opts for p in o.params]
    every = max(1, steps // EVALS)
    torch.manual_seed(ctx.options.seed + 1)  # the same dropout draws for every rate
    at, losses, diverged = [], [], None
    for step in range(steps):
        run.raise_if_cancelled()
        for o in opts:
            o.lr = _lr_at(step, steps, lr * factor)
        x, y = batch(step)
        _, loss = adapter.call_with_loss(model, x, y)
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(params, clip)
        for o in opts:
            o.step()
        if (step + 1) % every == 0 or step == steps - 1:
            run.progress((done + step + 1) / total)
            value = _val_loss(model, val_batches)
            at.append(step + 1)
            losses.append(value)
            if not math.isfinite(value):
                diverged = step + 1
                break
    tail = losses[-2:]
    score = sum(tail) / len(tail) if diverged is None else math.inf
    return ProbeRun(factor, lr * factor, at, losses, score, diverged)


def factor_name(factor: float) -> str:
    """The probe's name of a rate: LR/10, LR, 3xLR..."""
    return min(zip(LADDER, LADDER_NAMES), key=lambda pair: abs(math.log(pair[0] / factor)))[1]


def _ladder_index(factor: float) -> int:
    return min(range(len(LADDER)), key=lambda i: abs(math.log(LADDER[i] / factor)))


def next_factor(runs: list[ProbeRun]) -> float | None:
    """The next rate to probe: one step further along LADDER when the best run so far is the
    highest (or lowest) rate probed and beat its neighbour by the margin; None when the best is
    inside the rates probed, or at the ladder's end."""
    ordered = sorted(runs, key=lambda r: r.factor)
    best_i = min(range(len(ordered)), key=lambda i: ordered[i].score)
    best = ordered[best_i]
    if not math.isfinite(best.score) or len(ordered) < 2:
        return None
    if best_i == len(ordered) - 1:
        neighbour, step = ordered[-2], 1
    elif best_i == 0:
        neighbour, step = ordered[1], -1
    else:
        return None
    if neighbour.score - best.score <= max(MARGIN_NATS, MARGIN_FRACTION * best.score):
        return None
    i = _ladder_index(best.factor) + step
    return LADDER[i] if 0 <= i < len(LADDER) else None


@when_blocked("lr_probe")
def _lr_probe_blocked(ctx: CheckContext, blocked: list[str]) -> str | None:
    """Asked for with --lr-probe but blocked: say what the probe needs that this folder lacks."""
    if not ctx.options.lr_probe:
        return None  # not asked for: the engine's line is enough
    if ctx.ws.loop_log.exists() and not ctx.ws.tokenizer.exists():
        return (
            "--lr-probe trains short runs of your model on your tokens, and a watched loop's folder holds "
            "neither: run it on a workspace with your token files (minigpt prepare) and your model: "
            "minigpt check --workspace WS --model FILE.py:CLASS --config CONFIG.json --lr-probe"
        )
    return f"--lr-probe needs {', '.join(blocked)} to pass first (the probe trains on their batches and model)"


@check(
    "lr_probe",
    "optimization",
    "Short runs from LR/10 to 3xLR (to LR/100 or 100xLR while an end wins): the learning rate is not off",
    depends=("forward_shapes", "batch_shift"),
    slow=True,
)
def lr_probe(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    if not ctx.options.lr_probe:
        raise Outcome(
            Status.SKIP, "opt-in: --lr-probe trains short runs of the run's model (LR/10..3xLR, further if an end wins)"
        )
    lr, lr_source = run_learning_rate(ctx)
    if lr is None:
        raise Outcome(
            Status.SKIP,
            "no learning rate known: the checkpoint has no training settings and the log no lr; pass --lr",
        )
    if not (math.isfinite(lr) and lr > 0):
        raise Outcome(Status.SKIP, f"the run's learning rate {lr!r} ({lr_source}) is not positive: see loop_lr")
    if ctx.fault:
        lr = ctx.fault.learning_rate(lr)
    config_source, _ = ctx.config_source()
    if not ctx.config_from_run():
        raise Outcome(
            Status.SKIP,
            f"the probe trains the run's own model, and its config is unknown ({config_source}): "
            "pass --checkpoint or --config",
        )
    settings = ctx.run_settings()
    cfg = ctx.base_config()
    T = int(adapter.config_lookup(cfg, "block_size") or 32)  # type: ignore[call-overload]
    run_batch = settings.batch_size if settings is not None and settings.batch_size else None
    B = min(MAX_BATCH, int(run_batch or 16))
    clip = settings.grad_clip if settings is not None and settings.grad_clip else 0.0
    wd = settings.weight_decay if settings is not None and settings.weight_decay is not None else 0.1
    beta2 = settings.beta2 if settings is not None and settings.beta2 else 0.99
    steps = ctx.options.lr_probe_steps
    split = "val" if "val" in ctx.splits else "train"
    seed = ctx.options.seed + 101
    train_batches: dict[int, Batch] = {}

    def batch(step: int) -> Batch:
        if step not in train_batches:
            train_batches[step] = ctx.batch(B, T, split="train", seed=seed + step)
        return train_batches[step]

    val_batches = [ctx.batch(B, T, split=split, seed=seed - 1 - i) for i in range(EVAL_BATCHES)]
    total = steps * len(FACTORS)
    started = time.perf_counter()
    runs: list[ProbeRun] = []
    for i, factor in enumerate(FACTORS):
        runs.append(_probe_one(ctx, run, cfg, factor, lr, steps, batch, val_batches, clip, wd, beta2, i * steps, total))
        if i == 0:
            projected = (time.perf_counter() - started) * len(FACTORS)
            if projected > MAX_PROJECTED_S:
                raise Outcome(
                    Status.SKIP,
                    f"the probe would take about {projected / 60:.0f} min at this model size on this device; "
                    f"pass --lr-probe-steps below {steps}",
                )
    while (further := next_factor(runs)) is not None:  # the best is at an end: measure how far off the rate is
        done, total = total, total + steps
        runs.append(_probe_one(ctx, run, cfg, further, lr, steps, batch, val_batches, clip, wd, beta2, done, total))
    runs.sort(key=lambda r: r.factor)
    values = {
        "learning_rate": lr,
        "learning_rate_source": lr_source,
        "config_source": config_source,
        "steps": steps,
        "batch_size": B,
        "block_size": T,
        "split": split,
        "grad_clip": clip,
        "weight_decay": wd,
        "probe": [
            {"factor": factor_name(r.factor), "lr": r.lr, "val_loss": r.score, "diverged_at": r.diverged_at}
            for r in runs
        ],
        "curves": {factor_name(r.factor): [r.steps, r.val_losses] for r in runs},
        "seconds": round(time.perf_counter() - started, 2),
    }
    return _verdict(runs, lr, lr_source, steps, _baseline(ctx), values)


def _baseline(ctx: CheckContext) -> float | None:
    try:
        return math.log(ctx.tokenizer.vocab_size)
    except MiniGPTError:
        return None


def _losses_text(runs: list[ProbeRun]) -> str:
    def one(r: ProbeRun) -> str:
        loss = f"diverged at step {r.diverged_at}" if r.diverged_at is not None else f"{r.score:.3f}"
        return f"{factor_name(r.factor)} {r.lr:.2g}: {loss}"

    return ", ".join(one(r) for r in sorted(runs, key=lambda r: r.factor))


def _verdict(
    runs: list[ProbeRun], lr: float, lr_source: str, steps: int, baseline: float | None, values: dict
) -> CheckReturn:
    here = next(r for r in runs if r.factor == 1.0)
    best = min(runs, key=lambda r: r.score)
    name = factor_name(best.factor)
    values.update(best=name, best_lr=best.lr, measured_factor=best.factor)
    ratio = f"{best.factor:.2g}x the run's" if best.factor > 1 else f"1/{1 / best.factor:.2g} of the run's"
    advice = f"train at lr {best.lr:.2g} ({ratio}, the best rate the probe measured)"
    losses = f"val loss after {steps} steps: {_losses_text(runs)}"
    where = f"lr {lr:.3g} ({lr_source})"
    if not math.isfinite(best.score):
        raise Outcome(
            Status.FAIL,
            f"every probe rate diverged: {losses}",
            values=values,
            causes=["a numerical problem in the model, not the learning rate alone (see nonfinite_localisation)"],
            fixes=["run nonfinite_localisation and gradients", "try a much lower learning rate with --lr"],
        )
    if baseline is not None and best.score > LEARNED_FRACTION * baseline:
        raise Outcome(
            Status.WARN,
            f"unsure: no rate learned much in {steps} steps (best {best.score:.3f} vs log(V) {baseline:.3f}); {losses}",
            values=values,
            fixes=[f"a longer probe: --lr-probe-steps {steps * 3}"],
        )
    gap = here.score - best.score
    if best.factor < 1.0 and gap > max(MARGIN_NATS, MARGIN_FRACTION * best.score):
        status = Status.FAIL if gap > FAIL_NATS else Status.WARN
        if here.diverged_at is not None:
            how = f"it diverged at step {here.diverged_at}; {name} ({best.lr:.2g}) reached {best.score:.3f}"
        else:
            how = f"{name} ({best.lr:.2g}) ended {gap:.3f} nats lower"
        raise Outcome(
            status,
            f"{where} is too high: {how}; {losses}",
            values=values,
            causes=[
                "a learning rate too high for this model settles on a plateau above what a lower one reaches "
                "(short runs favour larger rates, so a lower one winning is strong evidence)"
            ],
            fixes=[advice],
        )
    if best.factor > 1.0 and gap > max(LOW_NATS, LOW_FRACTION * best.score):
        if best.factor >= OFF_FACTOR and gap > FAIL_NATS:  # too far for short runs' bias towards larger rates
            raise Outcome(
                Status.FAIL,
                f"{where} is too low: {name} ({best.lr:.2g}) ended {gap:.3f} nats lower; {losses}",
                values=values,
                causes=[f"a learning rate about {best.factor:.2g}x below the best the probe measured"],
                fixes=[advice],
            )
        raise Outcome(
            Status.WARN,
            f"{where} may be too low: {name} ({best.lr:.2g}) ended {gap:.3f} nats lower; {losses}",
            values=values,
            causes=[
                "a learning rate below what the model takes; but short runs favour larger rates, and a long run "
                "with a decaying schedule may catch up"
            ],
            fixes=[f"try lr {best.lr:.2g} ({ratio}) on a longer run, compared side by side"],
        )
    return f"{where} is near the best of LR/10..3xLR; {losses}", values
