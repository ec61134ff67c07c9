"""Numbers at the edges of their types (subnormals, the integer limits) are refused with the range
where the option works, or given their limiting meaning: a temperature too small to divide by is
greedy. Never a traceback from torch."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["train", "--steps", str(2**63)], "--steps must be at most 2**63 - 1"),
        (["train", "--lr", "5e-324"], "--lr must be a finite number >= 1.2e-38"),
        (["train", "--lr", "nan"], "--lr must be"),
        (["train", "--grad-clip", "1e-40"], "--grad-clip must be 0 (off) or"),
        (["train", "--warmup-steps", "-1"], "--warmup-steps must be an integer >= 0"),
        (["train", "--batch-size", "x" * 5000], "--batch-size must be a positive integer; found 'xxxx"),
        (["check", "--overfit-steps", str(2**40)], "--overfit-steps must be at most 1,000,000"),
        (["check", "--lr-probe-steps", "9"], "--lr-probe-steps must be an integer >= 10"),
        (["check", "--check-timeout", "nan"], "--check-timeout must be a number of seconds > 0"),
        (["check", "--lr", "inf"], "--lr must be"),
    ],
)
def test_a_number_outside_its_option_range_is_refused_before_any_work(tmp_path, capsys, argv, says):
    # GIVEN an empty folder: the refusal comes from the flag's range, before a workspace is read
    assert main([*argv, "--workspace", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert len(err) < 400  # a pasted megabyte is not echoed back
    assert not (tmp_path / "nothing").exists()


def test_the_ranges_hold_for_settings_read_from_a_checkpoint_too():
    from minigpt.checks.options import CheckOptions

    with pytest.raises(ConfigError, match="--lr must be"):
        TrainConfig.from_preset("debug", learning_rate=5e-324)
    with pytest.raises(ConfigError, match="--overfit-steps must be at most"):
        CheckOptions(workspace=Path("nowhere"), overfit_steps=2**40).resolve()


def test_the_tui_refuses_an_out_of_range_check_flag_with_exit_2(capsys):
    from minigpt_tui.__main__ import main as tui_main

    assert tui_main(["--overfit-steps", "0"]) == 2
    assert "--overfit-steps must be a positive integer" in capsys.readouterr().err
