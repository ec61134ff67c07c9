"""Loop checks on the learning rate a watched loop used: positive, moved by its scheduler, past its
warm-up by the end (see `loop_checks` for what all loop checks share).
"""

from __future__ import annotations

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.checks.watched import loop_values, watched_loop
from minigpt.loopwatch.loop_log import LoopLog


def _lr_series(log: LoopLog) -> list[list[float]]:
    return [[lr for lr in s.get("lrs", []) if isinstance(lr, int | float)] for s in log.steps]


@check("loop_lr_positive", "loop", "The learning rate is positive")
def loop_lr_positive(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx)
    series = _lr_series(log)
    negative = [s for s, lrs in zip(log.steps, series) if any(lr < 0 for lr in lrs)]
    zero = [s for s, lrs in zip(log.steps, series) if s["step"] > 1 and lrs and any(lr == 0 for lr in lrs)]
    if zero and log.finished:  # a schedule that decays to exactly 0 at its end (HF's cosine) is fine
        tail = 0
        for s in reversed(log.steps):
            if s in zero:
                tail += 1
            else:
                break
        if tail <= max(1, len(log.steps) // 50) and tail == len(zero):
            zero = []
    values = loop_values(
        log, negative_steps=len(negative), zero_steps=len(zero), first_lr=series[0] if series else None
    )
    if negative:
        raise Outcome(
            Status.FAIL,
            f"the learning rate is negative at {len(negative)} steps (first at step {negative[0]['step']}, "
            f"{negative[0]['lrs']}): the optimizer climbs the loss",
            values={**values, "first_step": negative[0]["step"]},
            causes=["a schedule that overshoots below zero (cosine with a wrong period, a sign error)"],
            fixes=["clamp the schedule at min_lr >= 0"],
        )
    if zero:
        raise Outcome(
            Status.FAIL,
            f"the learning rate is 0 at {len(zero)} of {len(log.steps)} steps (first at step {zero[0]['step']}): "
            "those steps change nothing",
            values={**values, "first_step": zero[0]["step"]},
            causes=["a warm-up multiplier of 0 that is never stepped", "lr=0 in a parameter group", "min_lr = 0 early"],
            fixes=["check the schedule's value at these steps; call scheduler.step() after optimizer.step()"],
        )
    lows = [min(lrs) for lrs in series if lrs]
    return f"positive at every step (from {min(lows):.3g} to {max(lows):.3g})", values


@check("loop_scheduler", "loop", "A learning-rate scheduler attached to the optimizer is stepped")
def loop_scheduler(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, need_steps=10)
    groups = log.header.get("groups", [])
    attached = bool(log.header.get("scheduler")) or any(g.get("has_initial_lr") for g in groups)
    series = _lr_series(log)
    constant = all(lrs == series[0] for lrs in series)
    values = loop_values(log, scheduler_attached=attached, lr_constant=constant, lrs=series[0])
    if not attached:
        how = "constant" if constant else f"set by the loop, {len({tuple(x) for x in series})} distinct values"
        return f"no lr_scheduler attached; learning rate {how}", values
    if not constant:
        return f"the learning rate changes over the run ({len({tuple(x) for x in series})} distinct values)", values
    initial = [g.get("initial_lr") for g in groups]
    moved_at_start = any(
        isinstance(i, int | float) and abs(lr - i) > 1e-12 * max(1.0, abs(i)) for lr, i in zip(series[0], initial)
    )
    message = (
        f"the learning rate stayed {series[0]} for all {len(log.steps)} steps although a scheduler is attached"
        + (f" (its initial_lr is {initial}: it set a start value and never moved)" if moved_at_start else "")
    )
    raise Outcome(
        Status.FAIL if moved_at_start else Status.WARN,
        message,
        values={**values, "initial_lr": initial},
        causes=["scheduler.step() never called", "scheduler.step() once per epoch in a run shorter than an epoch"],
        fixes=["call scheduler.step() after each optimizer.step()"],
    )


@check("loop_warmup_ends", "loop", "The warm-up ends before the run does")
def loop_warmup_ends(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, need_steps=10)
    lrs = [lrs[0] for lrs in _lr_series(log) if lrs]
    tail = lrs[-max(5, len(lrs) // 10) :]
    rising = len(tail) >= 2 and all(b > a for a, b in zip(tail, tail[1:]))
    values = loop_values(log, last_lr=lrs[-1], peak_lr=max(lrs), finished=log.finished)
    if not rising:
        return f"the learning rate is not rising at the end (last {lrs[-1]:.3g}, peak {max(lrs):.3g})", values
    if not log.finished:
        return f"still rising at step {log.last_step} while the run goes on (judged again when it ends)", values
    raise Outcome(
        Status.FAIL,
        f"the learning rate was still rising at the last step ({log.last_step}: {lrs[-1]:.3g}, over its last "
        f"{len(tail)} steps): the warm-up never ended",
        values=values,
        causes=["warmup_iters copied from a longer run (e.g. 2000 warm-up steps in a 500-step run)"],
        fixes=["warm up over ~1-10% of the steps the run really makes"],
    )
