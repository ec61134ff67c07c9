"""Every injected fault fails the check it exists to trip, names the cause, and nothing unrelated fails."""

from __future__ import annotations

import pytest

from minigpt.checks import FAULTS, CheckContext, CheckOptions, Status, run_checks

# words the intended check's summary or causes must contain for each fault
NAMES_THE_CAUSE = {
    "no_shift": "targets equal inputs",
    "out_of_range_token": "outside",
    "no_causal_mask": "sees the future",
    "lr_too_high": "learning rate",
    "frozen_parameters": "frozen",
    "wrong_architecture": "size mismatch",
    "dropout_on": "dropout",
    "softmax_loss": "probabilities",
    "transposed_logits": "[B, V, T]",
    "nan_weight": "first non-finite output",
    "val_copies_train": "contained in train",
    "shared_layers": "share one set of weights",
    "loose_tensor": "plain tensor attribute",
    "rows_mixed": "rows of a batch see each other",
    "keep_prob_dropout": "keep probability",
}
NEEDS_OVERFIT = {"softmax_loss"}


def run(ws, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("skip_overfit", True)
    return run_checks(CheckContext(CheckOptions(workspace=ws.root, **kw)))


def failures(report) -> set[str]:
    return {r.id for r in report.results if r.status in (Status.FAIL, Status.ERROR)}


def test_every_fault_has_a_cause_phrase():
    assert set(NAMES_THE_CAUSE) == set(FAULTS)


def test_healthy_trained_workspace_passes_everything(trained_workspace):
    report = run(trained_workspace, skip_overfit=False)
    statuses = {r.id: r.status for r in report.results}
    assert not failures(report), [(r.id, r.summary) for r in report.failed]
    assert statuses["checkpoint_load"] is Status.PASS
    assert statuses["single_batch_overfit"] is Status.PASS
    assert (
        report.by_id()["checkpoint_load"].values["loss"]
        < 0.85 * report.by_id()["initial_loss"].values["expected_baseline"]
    )


def test_fresh_workspace_without_checkpoint_passes_and_skips_checkpoint_checks(tiny_workspace):
    report = run(tiny_workspace)
    statuses = {r.id: r.status for r in report.results}
    assert not failures(report), [(r.id, r.summary) for r in report.failed]
    assert statuses["checkpoint_load"] is Status.SKIP
    assert statuses["tokenizer_fingerprint"] is Status.SKIP
    assert statuses["training_curve"] is Status.SKIP


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_injected_fault_fails_its_intended_check_only(trained_workspace, fault):
    spec = FAULTS[fault]
    report = run(trained_workspace, fault=fault, skip_overfit=fault not in NEEDS_OVERFIT, overfit_steps=60)
    failed = failures(report)
    intended = report.by_id()[spec.intended]
    assert intended.status is Status.FAIL, (fault, intended.summary)
    text = " ".join([intended.summary, *intended.causes]).lower()
    assert NAMES_THE_CAUSE[fault].lower() in text, (fault, intended.summary, intended.causes)
    unrelated = failed - {spec.intended, *spec.also_fails}
    assert not unrelated, {r.id: r.summary for r in report.results if r.id in unrelated}


def test_dropout_on_makes_the_overfit_run_with_dropout(trained_workspace):
    def final_loss(fault):
        ctx = CheckContext(CheckOptions(workspace=trained_workspace.root, device="cpu", fault=fault, overfit_steps=30))
        return run_checks(ctx, only=["single_batch_overfit"]).by_id()["single_batch_overfit"].values["final_loss"]

    # same seed and data: with always-on dropout 0.2 the memorised loss is measurably worse
    assert final_loss("dropout_on") > final_loss(None)


def test_nan_weight_names_the_module_holding_it(trained_workspace):
    report = run(trained_workspace, fault="nan_weight")
    result = report.by_id()["nonfinite_localisation"]
    poisoned = report.fault_notes[0].removeprefix("NaN in ").rsplit(".", 1)[0]
    assert result.values["first_module"] == poisoned
    assert result.values["nonfinite_parameters"]


def test_lr_too_high_overfit_reports_instability(trained_workspace):
    report = run_checks(
        CheckContext(
            CheckOptions(workspace=trained_workspace.root, device="cpu", fault="lr_too_high", overfit_steps=100)
        ),
        only=["single_batch_overfit"],
    )
    result = report.by_id()["single_batch_overfit"]
    assert result.status is Status.FAIL
    assert "learning rate too high" in " ".join(result.causes) or "non-finite" in result.summary
