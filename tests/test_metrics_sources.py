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
