"""A model class from a file outside the project, healthy or broken, is diagnosed by the right check."""

from __future__ import annotations

from pathlib import Path

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.cli import main

MODEL_FILE = Path(__file__).parent / "fixtures" / "tinygpt.py"


def run(ws, cls, config, only=None, **kw):
    opts = CheckOptions(
        workspace=ws.root,
        model_spec=f"{MODEL_FILE}:{cls}",
        config_path=config,
        device="cpu",
        skip_overfit=kw.pop("skip_overfit", True),
        **kw,
    )
    return run_checks(CheckContext(opts), only=only)


def failed(report) -> dict[str, str]:
    return {r.id: r.summary for r in report.results if r.status in (Status.FAIL, Status.ERROR)}


def test_healthy_user_model_has_no_false_alarm(tiny_workspace, user_config):
    report = run(tiny_workspace, "TinyGPT", user_config, skip_overfit=False)
    assert failed(report) == {}
    # it returns only the last position without targets: handled and noted, not failed
    assert any("last position" in n for n in report.by_id()["forward_shapes"].values["notes"])
    # its attention masks with -inf: not a false alarm for the non-finite check
    assert report.by_id()["nonfinite_localisation"].status is Status.PASS


def test_zero_initialised_residual_projections_are_not_a_false_alarm(tiny_workspace, user_config):
    report = run(tiny_workspace, "ZeroInitGPT", user_config)
    assert failed(report) == {}
    assert any("initialisation only" in n for n in report.by_id()["gradients"].values["notes"])


@pytest.mark.parametrize(
    "cls, check, phrase",
    [
        ("NoMaskGPT", "causal_independence", "sees the future"),
        ("BadInitGPT", "initial_loss", "far above"),
        ("UnusedLayerGPT", "gradients", "extra.weight"),
        ("DropoutBugGPT", "eval_determinism", "dropout"),
        ("DoubleShiftGPT", "loss_matches_logits", "double shift"),
        ("SumLossGPT", "loss_matches_logits", "reduction='sum'"),
        ("TrainModeLeakGPT", "causal_independence", "in train mode only"),
        ("RowIndexedGPT", "batch_independence", "depends on where a row sits in the batch"),
        ("SqueezeGPT", "causal_independence", "forward on a single token fails"),
        ("SoftmaxDimGPT", "causal_independence", "sees the future"),
        ("FiniteMaskFillGPT", "causal_independence", "sees the future"),
        ("FlippedMaskGPT", "causal_independence", "sees the future"),
        ("SequenceMeanGPT", "causal_independence", "sees the future"),
        ("SharedLayersGPT", "shared_modules", "layers.0 = layers.1"),
        ("IgnoreZeroGPT", "loss_matches_logits", "the loss ignores every target"),
    ],
)
def test_broken_user_model_fails_the_right_check(tiny_workspace, user_config, cls, check, phrase):
    report = run(tiny_workspace, cls, user_config)
    assert check in failed(report), failed(report)
    assert phrase in report.by_id()[check].summary
    # dependants may skip, but no unrelated check fails
    assert set(failed(report)) == {check, *ALSO_BROKEN.get(cls, ())}, failed(report)


# BatchNorm over (batch, time) breaks two properties at once: position t sees t+1, and rows see each other
# a flipped mask also hides the past: no position depends on an earlier token (batch_independence says so)
ALSO_BROKEN = {"TrainModeLeakGPT": ("batch_independence",), "FlippedMaskGPT": ("batch_independence",)}


def test_parrot_model_generation_warns_about_loops(tiny_workspace, user_config):
    report = run(tiny_workspace, "ParrotGPT", user_config, only=["generation_repetition"])
    result = report.by_id()["generation_repetition"]
    assert result.status is Status.WARN
    assert "loops" in result.summary


@pytest.mark.slow
def test_user_model_file_with_an_import_error_is_an_error_result_not_a_traceback(tiny_workspace, tmp_path, capsys):
    broken = tmp_path / "broken_model.py"
    broken.write_text("import torch\nraise RuntimeError('boom in user code')\n")
    report = run_checks(
        CheckContext(
            CheckOptions(workspace=tiny_workspace.root, model_spec=f"{broken}:Net", device="cpu", skip_overfit=True)
        )
    )
    errors = {r.id: r.summary for r in report.results if r.status is Status.ERROR}
    assert errors and all("boom in user code" in s for s in errors.values())
    code = main(
        [
            "check",
            "--workspace",
            str(tiny_workspace.root),
            "--model",
            f"{broken}:Net",
            "--skip-overfit",
            "--device",
            "cpu",
        ]
    )
    assert code == 2
    out = capsys.readouterr().out
    assert "boom in user code" in out and "Traceback" not in out


def test_missing_config_class_names_what_the_file_defines(tiny_workspace, tmp_path):
    from minigpt.errors import ModelSpecError
    from minigpt.model.user import load_model_spec

    with pytest.raises(ModelSpecError, match="TinyGPTConfig"):
        load_model_spec(f"{MODEL_FILE}:TinyGPT:NoSuchConfig")
