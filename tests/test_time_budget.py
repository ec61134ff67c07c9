"""Time-boxed training (`minigpt train --time`): the step count planned from measured throughput."""

from __future__ import annotations

import time

import pytest

from minigpt.cli import main
from minigpt.errors import ConfigError
from minigpt.logs.metrics import read_metrics
from minigpt.model.checkpoint import read_checkpoint
from minigpt.train.config import TrainConfig
from minigpt.train.time_budget import TimePlan, parse_duration
from minigpt.train.trainer import Trainer


@pytest.mark.parametrize(
    "text, seconds", [("8m", 480), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("45", 45), (" 2m 30s ", 150)]
)
def test_durations_in_the_usual_words(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "8 minutes", "m", "-5", "0", "3x", "inf"])
def test_anything_else_is_a_config_error_naming_the_flag(text):
    with pytest.raises(ConfigError, match="--time"):
        parse_duration(text)


def test_the_plan_fits_steps_and_evaluations_into_the_time_left():
    plan = TimePlan(budget_s=100.0, start_step=0)
    plan.measured_eval(2.0)  # one evaluation with its checkpoint: 2 s
    plan.measured_step(20, elapsed_s=2.0 + 2.0)  # 20 steps in 2 s besides that evaluation: 0.1 s a step
    assert plan.step_s == pytest.approx(0.1)
    # 96 s left, the last evaluation reserved: 94 s at 0.1 s a step plus 2 s every 50 steps = 0.14 s a step
    assert plan.plan(20, 4.0, eval_interval=50, warmup_steps=100) == 20 + 671
    assert plan.warmup_steps == 69  # a tenth of the planned steps, not the preset's 100
    assert plan.plan(500, 99.9, eval_interval=50, warmup_steps=100) == 500  # no time left: stop here
    assert plan.warmup_steps == 69  # planned once: later plans keep the schedule's shape


@pytest.mark.slow
def test_a_time_boxed_run_ends_in_its_budget_with_warmup_and_decay_complete(tiny_workspace):
    cfg = TrainConfig.from_preset("debug", device="cpu", eval_interval=50)
    trainer = Trainer(tiny_workspace.root, cfg, time_budget_s=6.0)
    notices: list[str] = []
    trainer.register_callback("on_notice", notices.append)
    summary = trainer.run()
    plan = trainer.time_plan
    assert plan is not None and plan.planned_steps is not None
    assert summary["steps"] == trainer.cfg.max_steps  # the plan was what ran
    assert summary["seconds"] < 6.0 + 3.0  # the budget, and at most a step and the last evaluation past it
    # the warm-up is a tenth of the first plan at most (a busier machine may shorten the run after
    # it, never below the end of the warm-up here)
    assert plan.first_planned_steps is not None
    assert trainer.cfg.warmup_steps <= max(1, plan.first_planned_steps // 10) < summary["steps"]
    points = list(read_metrics(tiny_workspace.metrics).points)
    last = points[-1]
    assert last.step == summary["steps"] and last.val_loss is not None  # the last step evaluated and saved
    if plan.cut_at is None:  # the plan held: the decay reached its floor at the last step
        assert last.lr == pytest.approx(cfg.learning_rate * cfg.min_lr_ratio, rel=0.05)
    else:  # a machine that slowed after the last plan ends the run early, and the run says so
        assert plan.cut_at == summary["steps"] and last.lr < cfg.learning_rate
        assert any(
            f"--time ran out at step {plan.cut_at:,}" in n and "short of the decay's floor" in n for n in notices
        )
    saved = read_checkpoint(tiny_workspace.latest_checkpoint)
    assert saved["step"] == summary["steps"] and saved["train_config"]["max_steps"] == summary["steps"]


def test_time_and_steps_together_are_refused(tiny_workspace, capsys):
    assert main(["train", "--workspace", str(tiny_workspace.root), "--time", "1m", "--steps", "10"]) == 2
    assert "--time plans the step count itself" in capsys.readouterr().err


@pytest.mark.slow
def test_a_machine_that_slows_after_the_plan_ends_the_run_early_and_says_so(tiny_workspace):
    # GIVEN a time-boxed run whose steps become far slower once the plan is made (a neighbour took the cores)
    cfg = TrainConfig.from_preset("debug", device="cpu", eval_interval=50)
    trainer = Trainer(tiny_workspace.root, cfg, time_budget_s=4.0)
    notices: list[str] = []
    trainer.register_callback("on_notice", notices.append)

    def slow_after_the_plan(*_args, **_kwargs) -> None:
        if trainer.time_plan is not None and trainer.time_plan.planned_steps is not None:
            time.sleep(0.25)

    trainer.register_callback("on_step_end", slow_after_the_plan)
    # WHEN it runs past its budget between two plans
    summary = trainer.run()
    # THEN it ends early, at the step where time ran out, and says the decay stopped short of its floor
    plan = trainer.time_plan
    assert plan is not None and plan.cut_at == summary["steps"] < (plan.first_planned_steps or 0)
    assert any(f"--time ran out at step {plan.cut_at:,}" in n for n in notices), notices
