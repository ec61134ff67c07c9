"""The training logs `--metrics` takes besides a metrics JSONL and TensorBoard: nanoGPT's saved stdout."""

from __future__ import annotations

import math

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks


def _lines(s: int) -> str:
    """What nanoGPT's train.py prints at iteration `s`: an evaluation every 100, the loss every 10."""
    train, val = 4.2 * math.exp(-s / 400), 4.25 * math.exp(-s / 420)
    evaluation = f"step {s}: train loss {train:.4f}, val loss {val:.4f}\n" if s % 100 == 0 else ""
    return evaluation + f"iter {s}: loss {train:.4f}, time 31.52ms, mfu 4.32%\n"


NANOGPT_STDOUT = "tokens per iteration will be: 8,192\nnumber of parameters: 0.80M\n" + "".join(
    _lines(s) for s in range(0, 500, 10)
)


def test_nanogpts_saved_stdout_is_judged_and_named(tiny_workspace, tmp_path):
    # GIVEN nanoGPT's stdout kept as train.log, passed to the check as --metrics
    log = tmp_path / "train.log"
    log.write_text(NANOGPT_STDOUT)
    opts = CheckOptions(workspace=tiny_workspace.root, metrics=log, device="cpu", skip_overfit=True)
    result = run_checks(CheckContext(opts), only=["training_curve"]).by_id()["training_curve"]
    # THEN the curve is judged from its lines (never "0 train loss values"), and the import is named
    assert result.status is not Status.SKIP, result.summary
    assert result.values["points"] == 50
    assert "nanoGPT's stdout" in result.summary and "minigpt import nanogpt" in result.summary


def test_weights_saved_without_a_step_never_read_step_none():
    from minigpt.checks.training_checks import step_words

    assert step_words(None) == "no training step saved with the weights" and step_words(200) == "step 200"


def test_a_summary_line_at_the_last_step_keeps_the_final_val_loss_in_the_cli_and_json(tiny_workspace, tmp_path, capsys):
    # GIVEN the lines a Trainer's callback writes: val 3.0/2.5/2.3/2.9 at steps 25-100, then the
    # end-of-training summary at step 100
    import json
    from pathlib import Path

    from minigpt.cli import main

    log = Path(__file__).parent / "fixtures" / "curves" / "hf_end_of_training_line.jsonl"
    report = tmp_path / "report.json"
    args = ["check", "--workspace", str(tiny_workspace.root), "--metrics", str(log), "--only", "training_curve"]
    main([*args, "--json", str(report)])
    out = capsys.readouterr().out
    (curve,) = [c for c in json.loads(report.read_text())["checks"] if c["id"] == "training_curve"]
    # THEN the CLI and the JSON tell the same story: overfitting, the last val 2.9
    assert curve["values"]["shape"] == "overfitting" and curve["values"]["last_val_loss"] == 2.9
    assert "overfitting" in out and "2.900 (last)" in " ".join(out.split())
