"""`minigpt train` with nanoGPT's model flags over a preset, and --resume saying what it overrode."""

from __future__ import annotations

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, run_checks
from minigpt.cli import main


def train(ws, *flags: str) -> int:
    return main(["train", "--workspace", str(ws.root), "--device", "cpu", "--quiet", *flags])


def test_nanogpt_flags_set_the_model_shape(tiny_workspace, capsys):
    code = train(
        tiny_workspace, "--n-layer", "3", "--n-head", "2", "--n-embd", "48", "--block-size", "24",
        "--batch-size", "4", "--dropout", "0.1", "--steps", "4", "--eval-interval", "4",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0
    assert "model: n_layer 3, n_head 2, n_embd 48, block_size 24, dropout 0.1; batch_size 4;" in err
    assert "at peak (estimate)" in err
    saved = torch.load(tiny_workspace.latest_checkpoint, weights_only=True)
    cfg = saved["config"]
    assert (cfg["num_layers"], cfg["num_heads"], cfg["embedding_dim"], cfg["block_size"], cfg["dropout"]) == (
        3, 2, 48, 24, 0.1,
    )  # fmt: skip
    assert saved["train_config"]["batch_size"] == 4


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--n-embd", "50", "--n-head", "4"], "--n-embd 50 must be divisible by --n-head 4"),
        (["--n-layer", "0"], "--n-layer must be a positive integer; found 0"),
        (["--block-size", "-3"], "--block-size must be a positive integer"),
        (["--dropout", "1.0"], "--dropout must be in [0, 1)"),
    ],
)
def test_bad_shape_flags_exit_2_naming_the_flag(tiny_workspace, capsys, flags, message):
    assert train(tiny_workspace, *flags, "--steps", "2") == 2
    out = capsys.readouterr()
    assert message in out.err + out.out
    assert not tiny_workspace.latest_checkpoint.exists()


def test_a_shape_past_the_memory_estimate_is_refused(tiny_workspace, capsys):
    code = train(tiny_workspace, "--n-layer", "4000", "--n-embd", "4096", "--n-head", "32", "--steps", "1")
    out = capsys.readouterr()
    assert code == 2
    assert "allow-large" in out.err + out.out


def test_resume_refuses_shape_flags_by_their_names(trained_workspace, capsys):
    assert train(trained_workspace, "--resume", "--n-layer", "4", "--steps", "200") == 2
    assert "--resume keeps the checkpoint's model shape; drop --n-layer" in capsys.readouterr().err


def test_resume_with_new_lr_and_batch_size_says_what_it_overrode(trained_workspace, capsys):
    # GIVEN the debug run (lr 1e-3, batch 8, 120 steps); WHEN resumed with --lr 0.01 --batch-size 4
    code = train(trained_workspace, "--resume", "--lr", "0.01", "--batch-size", "4", "--steps", "200")
    err = capsys.readouterr().err
    assert code == 0
    assert "--resume overrides the saved settings:" in err
    assert "--learning-rate 0.001 -> 0.01" in err and "--batch-size 8 -> 4" in err and "--max-steps 120 -> 200" in err
    # THEN the curve check names the LR change at the resume instead of calling it a warm-up bump
    report = run_checks(
        CheckContext(CheckOptions(workspace=trained_workspace.root, device="cpu", skip_overfit=True)),
        only=["training_curve"],
    )
    result = report.by_id()["training_curve"]
    assert result.values["lr_raise_steps"], result.summary
    assert "learning rate raised" in result.summary and "warmup bump" not in result.summary
