"""A learning-rate change at a resume is named as such: never a warm-up bump, and the first
suspect when the loss rose after it."""

from __future__ import annotations

import math

from minigpt.logs.curve_rules import diagnose
from minigpt.logs.metrics import MetricPoint


def lr_at(step: int, peak: float, warmup: int = 20, total: int = 400) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    return 0.1 * peak + 0.5 * (1 + math.cos(math.pi * progress)) * 0.9 * peak


def resumed_run(new_peak: float, rise: float, recover: bool) -> list[MetricPoint]:
    """400 steps logged every 10: peak 1e-3, resumed at step 200 with `new_peak`; the loss jumps by `rise`."""
    points = []
    for step in range(0, 400, 10):
        loss = 2.0 + 2.2 * math.exp(-step / 60) + 0.01 * math.sin(step)
        peak = 1e-3 if step < 200 else new_peak
        if step >= 200:
            loss += rise * (math.exp(-(step - 200) / 30) if recover else 1.0)
        points.append(MetricPoint(step, train_loss=loss, lr=lr_at(step, peak)))
    return points


def test_a_higher_lr_at_resume_that_made_the_loss_rise_is_named_first():
    d = diagnose(resumed_run(1e-2, rise=1.5, recover=False), baseline=math.log(65))
    assert d.shape in ("unstable", "spikes")  # a step up the LR caused: either way, the raise is named first
    assert d.values["lr_raise_steps"] == [200]
    assert d.causes[0].startswith("the learning rate was raised from") and "at step 200" in d.causes[0]
    assert "resume from the checkpoint before step 200" in d.fixes[0]
    assert "warmup bump" not in d.summary


def test_a_raise_whose_bump_recovers_is_named_not_called_a_warmup_bump():
    d = diagnose(resumed_run(1e-2, rise=0.4, recover=True), baseline=math.log(65))
    assert "learning rate raised" in d.summary and "at step 200" in d.summary
    assert "warmup bump" not in d.summary
    assert d.values["warmup_end_step"] is not None and d.values["warmup_end_step"] < 200


def test_a_warmup_alone_is_no_raise():
    d = diagnose(resumed_run(1e-3, rise=0.0, recover=True), baseline=math.log(65))
    assert d.values["lr_raise_steps"] == [] and "raised" not in d.summary
