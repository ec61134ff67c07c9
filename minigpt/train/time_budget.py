"""Time-boxed training (`minigpt train --time 8m`): the step count from measured throughput.

The learning-rate schedule needs the number of steps up front (the cosine decays to its floor at
`max_steps`), and a wall-clock budget does not give it. So the run measures itself: after the
first `CALIBRATION_STEPS` steps, and one evaluation timed on the side, it sets `max_steps` so that
the steps left, the evaluations they bring (every `eval_interval` steps, and the last) and their
checkpoints fit the time left; at every evaluation it plans again with what it measured so far
(a machine that got busier shortens the run, never overruns it by more than a step). The warm-up
is kept to at most a tenth of the planned steps, so warm-up and decay both complete in the budget.
A run that reaches the end of its budget early stops there and evaluates and saves once more.
The first plan also sets how often and on how many batches a fresh run evaluates (`eval_plan`): a
budget that fits only a few of the preset's intervals gets several evaluations, and evaluations
never take more than about a fifth of the time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from minigpt.errors import ConfigError
from minigpt.train.eval_plan import EvalPlan, evaluations, plan_evals

CALIBRATION_STEPS = 20
WARMUP_SHARE = 0.1  # the warm-up takes at most this share of the planned steps
_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([hms])")


def parse_duration(text: str) -> float:
    """Seconds from `8m`, `90s`, `1h30m`, `1.5h` or a plain number of seconds; ConfigError otherwise."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or _DURATION.sub("", value).strip():
            raise ConfigError(
                f"--time {text!r}: expected a duration such as 8m, 90s, 1h30m or a number of seconds"
            ) from None
        seconds = sum(float(n) * _UNITS[unit] for n, unit in parts)
    if not 0 < seconds < float("inf"):
        raise ConfigError(f"--time {text!r}: the budget must be more than 0 seconds")
    return seconds


@dataclass
class TimePlan:
    """What the run measured and what it planned (all seconds are wall time)."""

    budget_s: float
    start_step: int  # where this run started (a resume starts late)
    step_s: float | None = None  # one optimizer step, evaluations excluded
    eval_s: float | None = None  # one evaluation with its checkpoint
    evals: int = 0  # evaluations timed
    eval_total_s: float = 0.0  # spent evaluating and saving so far (the calibration's dry evaluation too)
    eval_scaled_s: float = 0.0  # the evaluations timed, scaled to the batches they use now (eval_s's sum)
    eval_plan: EvalPlan | None = None  # how often and on how many batches, set at the first plan
    planned_steps: int | None = None
    first_planned_steps: int | None = None  # the first plan, which fixed the warm-up
    warmup_steps: int | None = None
    cut_at: int | None = None  # the budget ran out before the plan's last step: the run ended here

    def measured_step(self, step: int, elapsed_s: float) -> None:
        done = step - self.start_step
        if done > 0:
            self.step_s = max(1e-6, (elapsed_s - self.eval_total_s) / done)

    def measured_eval(self, seconds: float) -> None:
        self.eval_total_s += seconds
        self.eval_scaled_s += seconds
        self.evals += 1
        self.eval_s = self.eval_scaled_s / self.evals

    def _steps_that_fit(self, elapsed_s: float, eval_interval: int, eval_s: float) -> int:
        assert self.step_s is not None
        left = self.budget_s - elapsed_s - eval_s  # the last evaluation and save always happen
        return max(0, int(left / (self.step_s + eval_s / max(1, eval_interval))))

    def choose_evals(
        self, step: int, elapsed_s: float, *, eval_interval: int, eval_batches: int, log_interval: int, choose: bool
    ) -> EvalPlan:
        """A fresh run's evaluation schedule in the time left (`eval_plan.plan_evals` on the steps the
        configured one would fit), before the first plan; the evaluations timed so far are scaled to
        the batches it keeps, so the plan counts what the run's evaluations will cost."""
        assert self.step_s is not None and self.eval_s is not None
        end = step + self._steps_that_fit(elapsed_s, eval_interval, self.eval_s)
        chosen = plan_evals(
            end,
            eval_interval,
            eval_batches,
            start=step,
            log_interval=log_interval,
            step_cost=self.step_s,
            eval_cost=self.eval_s,
            choose=choose,
            cap=True,
            share_of="the time left",
        )
        scale = chosen.batches / eval_batches
        self.eval_s *= scale
        self.eval_scaled_s *= scale
        # counted again over the steps that fit with the schedule chosen
        end = step + self._steps_that_fit(elapsed_s, chosen.interval, self.eval_s)
        count = evaluations(end, chosen.interval, step)
        share = count * self.eval_s / max(1e-9, self.budget_s - elapsed_s)
        self.eval_plan = replace(chosen, evaluations=count, share=min(1.0, share))
        return self.eval_plan

    def plan(self, step: int, elapsed_s: float, eval_interval: int, warmup_steps: int) -> int:
        """The run's `max_steps` from here: the steps that fit the time left with their evaluations."""
        assert self.step_s is not None and self.eval_s is not None
        more = self._steps_that_fit(elapsed_s, eval_interval, self.eval_s)
        self.planned_steps = max(step + 1 if more else step, step + more)
        if self.warmup_steps is None:  # once, at the first plan: later plans keep the schedule's shape
            self.first_planned_steps = self.planned_steps
            self.warmup_steps = max(1, min(warmup_steps, int(WARMUP_SHARE * self.planned_steps)))
        return self.planned_steps

    def describe(self) -> str:
        step_ms = 1000 * (self.step_s or 0.0)
        return (
            f"time budget {self.budget_s:.0f} s: {self.planned_steps:,} steps planned "
            f"({step_ms:.0f} ms a step, {self.eval_s or 0.0:.2f} s an evaluation with its checkpoint; "
            f"warm-up {self.warmup_steps} steps)" + (f"; {self.eval_plan.describe()}" if self.eval_plan else "")
        )
