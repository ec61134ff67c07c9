"""The training settings (`minigpt.train.config`): what `TrainConfig` refuses and in which words,
the learning-rate schedule, and the optimizer's parameter groups."""

from __future__ import annotations

import math
import re

import pytest
import torch

from minigpt.errors import ConfigError
from minigpt.model.gpt import MiniGPT
from minigpt.train.config import TrainConfig, lr_at, make_optimizer


def test_warmup_is_linear_and_peaks_at_its_end():
    cfg = TrainConfig(learning_rate=1e-3, warmup_steps=10, max_steps=100, min_lr_ratio=0.1)
    warmup = [lr_at(s, cfg) for s in range(10)]
    steps = [b - a for a, b in zip(warmup, warmup[1:])]
    assert warmup[0] == pytest.approx(1e-4)
    assert steps == pytest.approx([1e-4] * 9)
    assert lr_at(9, cfg) == pytest.approx(1e-3)
    assert lr_at(10, cfg) == pytest.approx(1e-3)
    assert max(lr_at(s, cfg) for s in range(100)) == pytest.approx(1e-3)


def test_cosine_decays_monotonically_to_the_floor():
    cfg = TrainConfig(learning_rate=1e-3, warmup_steps=10, max_steps=100, min_lr_ratio=0.1)
    decay = [lr_at(s, cfg) for s in range(10, 101)]
    assert all(b <= a for a, b in zip(decay, decay[1:]))
    assert lr_at(55, cfg) == pytest.approx(0.55e-3)  # halfway: mean of peak and floor
    assert lr_at(100, cfg) == pytest.approx(1e-4)
    assert lr_at(500, cfg) == pytest.approx(1e-4)


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError, match="preset"):
        TrainConfig.from_preset("huge")


def test_bad_training_flags_are_config_errors():
    for bad in ({"eval_interval": 0}, {"batch_size": 0}, {"learning_rate": -1.0}, {"grad_accum": 0}, {"num_heads": 5}):
        with pytest.raises(ConfigError):
            TrainConfig.from_preset("debug", **bad)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("max_steps", "200", "max-steps must be an integer"),  # a hand-edited checkpoint's string
        ("batch_size", True, "batch-size must be an integer"),
        ("learning_rate", math.nan, "must be a finite number"),
        ("dtype", "float8", "dtype must be one of"),
        ("compile", "yes", "compile must be true or false"),
        ("min_lr_ratio", 1.5, "min_lr_ratio in [0, 1]"),
        ("beta2", 1.0, "beta2 in [0, 1)"),
    ],
)
def test_a_mistyped_or_out_of_range_setting_names_itself(field, value, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        TrainConfig(**{field: value})


def test_from_preset_ignores_unset_overrides_and_applies_the_rest():
    cfg = TrainConfig.from_preset("small", max_steps=None, seed=3)
    assert cfg.max_steps == 2500 and cfg.seed == 3 and cfg.learning_rate == 2e-3


def test_no_weight_decay_on_one_dimensional_parameters_and_none_on_frozen_ones():
    cfg = TrainConfig.from_preset("debug", weight_decay=0.1)
    model = MiniGPT(cfg.model_config(vocab_size=20))
    frozen = next(p for p in model.parameters() if p.dim() >= 2)
    frozen.requires_grad_(False)
    opt = make_optimizer(model, cfg)
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    in_groups = {id(p) for g in opt.param_groups for p in g["params"]}
    assert id(frozen) not in in_groups
    assert in_groups == {id(p) for p in model.parameters() if p.requires_grad}
    assert opt.defaults["lr"] == cfg.learning_rate and opt.defaults["betas"] == (0.9, cfg.beta2)
    assert isinstance(opt, torch.optim.AdamW)
