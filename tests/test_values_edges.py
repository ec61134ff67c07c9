"""Numbers at the edges of their types (subnormals, the integer limits) are refused with the range
where the option works, or given their limiting meaning: a temperature too small to divide by is
greedy. Never a traceback from torch."""

from __future__ import annotations

import pytest
import torch

from minigpt.cli import main
from minigpt.errors import ConfigError, SamplerSettingsError
from minigpt.sample.generate import apply_temperature
from minigpt.sample.settings import SamplerSettings, validate
from minigpt.train.config import TrainConfig


def test_a_temperature_below_the_float_floor_is_greedy():
    logits = torch.tensor([1.0, 50.0, -3.0, 49.0])
    assert torch.equal(apply_temperature(logits, 1e-39), apply_temperature(logits, 0.0))
    notices = validate(SamplerSettings(temperature=1e-39), vocab_size=4)
    assert any("greedy" in n for n in notices)


@pytest.mark.parametrize("penalty", [1e-320, 5e-324, 1e-300, 1e300])
def test_a_repetition_penalty_outside_its_working_range_is_refused_naming_the_range(penalty):
    with pytest.raises(SamplerSettingsError, match="repetition_penalty must be in"):
        validate(SamplerSettings(repetition_penalty=penalty), vocab_size=4)


@pytest.mark.parametrize("seed", [2**63, 2**64, -1, -(2**63) - 1, 10**30])
def test_a_seed_outside_int64_is_refused(seed):
    with pytest.raises(SamplerSettingsError, match="seed must be"):
        validate(SamplerSettings(seed=seed), vocab_size=4)
    with pytest.raises(ConfigError, match="seed must be"):
        TrainConfig.from_preset("debug", seed=seed)


@pytest.mark.parametrize("seed", [0, 2**63 - 1])
def test_the_seed_limits_themselves_work(seed):
    validate(SamplerSettings(seed=seed), vocab_size=4)
    TrainConfig.from_preset("debug", seed=seed)


def test_sample_cli_at_the_edges_answers_without_a_traceback(trained_workspace, capsys):
    root = str(trained_workspace.root)
    base = ["sample", "--workspace", root, "--max-new-tokens", "5"]
    assert main([*base, "--temperature", "1e-39", "--seed", "1"]) == 0
    assert main([*base, "--repetition-penalty", "1e-320"]) == 2
    assert main([*base, "--seed", str(2**64)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "repetition_penalty must be in" in err and "seed must be" in err


def test_train_cli_refuses_a_seed_outside_int64(tiny_workspace, capsys):
    assert main(["train", "--workspace", str(tiny_workspace.root), "--seed", str(2**64), "--quiet"]) == 2
    assert "seed must be" in capsys.readouterr().err
