"""How often a run evaluates, and on how many batches: a short run gets several evaluations.

A preset's `eval_interval` is sized for its own step count (`small`: every 250 of 2,500 steps). A
run planned shorter (`--steps 300`, or `--time 2m` on a slow machine: 135 steps) would evaluate once,
at the end, and its curve would be judged on the train loss alone. So a fresh run whose user did not
pass `--eval-interval` and that would evaluate fewer than `FEW_EVALS` times gets an interval that
gives about `TARGET_EVALS`, never below the log interval. Evaluations cost time (the train and val
windows' forward passes, the checkpoint, the sample): when the planned ones would take more than
`EVAL_SHARE` of the run, each evaluates on fewer batches (never under `MIN_EVAL_BATCHES`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FEW_EVALS = 4  # fewer evaluations than this over a run: the interval is chosen (the presets give 4 and 10)
TARGET_EVALS = 8  # what a chosen interval aims at: the curve's oscillation rule reads 4 in the second half
EVAL_SHARE = 0.2  # the most of a run's time its evaluations may take before they use fewer batches
# batches per split an evaluation keeps however short the run (small: 4,096 tokens). The same windows
# at every evaluation: fewer of them move the val loss's level a little, never its curve's shape
MIN_EVAL_BATCHES = 2


@dataclass(frozen=True)
class EvalPlan:
    """A run's evaluation schedule and why (costs in any one unit: seconds, or steps' compute)."""

    interval: int  # evaluate every `interval` steps, and at the last
    batches: int  # batches per split at each evaluation
    evaluations: int  # over the run, the last step's included
    chosen: bool  # the interval was chosen here (not the user's or the preset's)
    configured_batches: int  # before the share was enforced
    share: float  # of the run the evaluations are expected to take
    share_of: str  # of what, in words: "the time left", "the run's compute" (checkpoints and samples left out)

    def describe(self) -> str:
        """`evaluating every 17 steps (8 evaluations, chosen for a short run; --eval-interval N to set
        it) on 6 batches a split (of 20: evaluations take about 19% of the run's compute)`."""
        how = f"evaluating every {self.interval} steps ({self.evaluations} evaluation{'s' * (self.evaluations != 1)}"
        if self.chosen:
            how += ", chosen for a short run; --eval-interval N to set it"
        how += f") on {self.batches} batch{'es' * (self.batches != 1)} a split"
        if self.batches < self.configured_batches:
            how += f" (of {self.configured_batches}: evaluations take about {self.share:.0%} of {self.share_of})"
        return how


def evaluations(end: int, interval: int, start: int = 0) -> int:
    """Evaluations of a run from step `start` to `end`: every multiple of `interval` after `start`,
    and the last step."""
    if end <= start:
        return 0
    return end // interval - start // interval + (1 if end % interval else 0)


def plan_evals(
    end: int,
    interval: int,
    batches: int,
    *,
    start: int = 0,
    log_interval: int,
    step_cost: float,
    eval_cost: float,
    choose: bool,
    cap: bool,
    share_of: str,
) -> EvalPlan:
    """The schedule for a run from step `start` to `end`, each step costing `step_cost`, whose
    evaluations cost `eval_cost` each at `batches` batches a split. `choose`: the interval is ours
    to pick (a fresh run, no --eval-interval); `cap`: keep the evaluations to EVAL_SHARE of the run
    even with the interval as given (a time budget). An evaluation's cost is taken as proportional
    to its batches."""
    steps = end - start
    count = evaluations(end, interval, start)
    chosen = False
    if choose and count < FEW_EVALS:
        candidate = max(1, log_interval, math.ceil(steps / TARGET_EVALS))
        if evaluations(end, candidate, start) > count:
            interval, count, chosen = candidate, evaluations(end, candidate, start), True
    kept = batches
    # evaluations at most EVAL_SHARE of the steps and evaluations together
    allowed = EVAL_SHARE / (1 - EVAL_SHARE) * steps * step_cost
    least = eval_cost * min(batches, MIN_EVAL_BATCHES) / batches  # an evaluation on the fewest batches
    if chosen and count * least > allowed:  # over the share even so: fewer of them, never under FEW_EVALS
        fewer = max(FEW_EVALS, int(allowed / least))
        candidate = max(1, log_interval, math.ceil(steps / fewer))
        if evaluations(end, candidate, start) < count:
            interval, count = candidate, evaluations(end, candidate, start)
    if (chosen or cap) and count * eval_cost > allowed:
        kept = min(batches, max(MIN_EVAL_BATCHES, int(batches * allowed / (count * eval_cost))))
    cost = count * eval_cost * kept / batches
    total = steps * step_cost + cost
    return EvalPlan(interval, kept, count, chosen, batches, cost / total if total > 0 else 0.0, share_of)


def eval_steps_cost(eval_batches: int, grad_accum: int) -> float:
    """One evaluation's compute in training steps, before a run has timed either: the train and val
    windows' forward passes (`eval_batches` batches each) against a step's forward and backward over
    `grad_accum` batches (a backward costs about two forwards). The checkpoint and sample are left out."""
    return 2 * eval_batches / (3 * grad_accum)
