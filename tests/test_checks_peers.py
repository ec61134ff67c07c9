"""Model checks name causes they measured: a parameter whose gradient or update is orders
of magnitude below its peers' is probed, not passed as alive (a saturated gate fails `gradients`; a
branch the loss ignores warns; a key bias the softmax cancels is noted as harmless; a gain stored at
the wrong scale warns `optimizer_update`), the floors set below every healthy design of the zoo
(benchmarks/peer_ratios.py); and eval_determinism says which of modes, per-call state or random
draws made two eval passes differ."""

from __future__ import annotations

import pytest

from minigpt.checks import Status
from minigpt.checks.peers import GRAD_PEER_FLOOR, far_below, grad_peer_ratios, kind
from tests.test_checks_usermodel import failed, run


def _row(name: str, shape: list[int], grad_norm: float | None) -> dict:
    numel = 1
    for n in shape:
        numel *= n
    return {"name": name, "shape": shape, "numel": numel, "grad_norm": grad_norm}


def test_peers_are_of_the_same_kind_and_scale_with_size():
    rows = [_row(f"w{i}", [64, 64], 64.0 * 1e-2) for i in range(4)]  # RMS 1e-2 each
    rows += [_row(f"b{i}", [64], 8.0 * 1e-4) for i in range(3)]  # vectors: RMS 1e-4, their own median
    rows += [_row("gate", [64], 8.0 * 1e-12), _row("missing", [64], None), _row("zero", [64], 0.0)]
    ratios = grad_peer_ratios(rows)
    assert kind([64, 64]) == "matrix" and kind([64]) == "vector"
    assert ratios["w0"] == pytest.approx(1.0) and ratios["b0"] == pytest.approx(1.0)
    assert "missing" not in ratios and "zero" not in ratios  # judged by their own flags
    assert far_below(ratios, GRAD_PEER_FLOOR) == [("gate", pytest.approx(1e-8))]


def test_a_saturated_gate_fails_gradients_naming_it_and_the_flat_stretch(tiny_workspace, user_config):
    report = run(tiny_workspace, "SaturatedGateGPT", user_config)
    result = report.by_id()["gradients"]
    assert result.status is Status.FAIL, result.summary
    assert "gates.0" in result.summary and "though the loss depends on them" in result.summary
    assert "the loss ignores" in result.summary and "ff.0.weight" in result.summary  # the branch behind it
    assert "saturated sigmoid" in result.causes[0] and result.causes[0].startswith("measured: replacing gates.")
    rows = {r["name"]: r for r in result.values["far_below_peers"]}
    assert rows["gates.0"]["loss_change_when_replaced"] > 1e-3 and rows["gates.0"]["grad_to_peers"] < 1e-8
    # and nothing unrelated fails (what needs gradients is skipped behind it)
    assert set(failed(report)) == {"gradients"}, failed(report)


def test_a_branch_scaled_away_by_a_buffer_warns_that_the_loss_ignores_its_weights(tiny_workspace, user_config):
    report = run(tiny_workspace, "FrozenLayerScaleGPT", user_config, only=["gradients"])
    result = report.by_id()["gradients"]
    assert result.status is Status.WARN, result.summary
    assert "the loss ignores" in result.summary and "ff.0.weight" in result.summary
    assert "cause not determined" in result.causes[0]


def test_a_key_bias_the_softmax_cancels_passes_with_a_note(tiny_workspace, user_config):
    report = run(tiny_workspace, "KeyBiasGPT", user_config)
    assert failed(report) == {}
    result = report.by_id()["gradients"]
    assert result.status is Status.PASS, result.summary
    assert any("attn.k.bias" in n and "harmless" in n for n in result.values["notes"]), result.values["notes"]


def test_a_gain_stored_ten_thousand_times_too_large_warns_optimizer_update_naming_its_scale(
    tiny_workspace, user_config
):
    report = run(tiny_workspace, "StoredScaleGPT", user_config, only=["optimizer_update"])
    assert report.by_id()["gradients"].status is Status.PASS  # its gradient is within range of its peers'
    result = report.by_id()["optimizer_update"]
    assert result.status is Status.WARN, result.summary
    assert "barely move under the step" in result.summary and "gains.0" in result.summary
    assert "weights are 10000x its peers'" in result.causes[0], result.causes
    assert {r["name"] for r in result.values["far_below_peers"]} == {"gains.0", "gains.1"}


def test_an_embedding_is_measured_over_the_rows_the_batch_reached(tiny_workspace, user_config):
    # the rows of tokens outside the batch move by weight decay alone: not a parameter that barely learns
    report = run(tiny_workspace, "TinyGPT", user_config, only=["optimizer_update"])
    result = report.by_id()["optimizer_update"]
    assert result.status is Status.PASS and result.values["far_below_peers"] == []
    name, ratio = result.values["lowest_to_peers"]
    assert ratio > 0.01, (name, ratio)  # far above the floor (1e-3)


# -- eval_determinism names what it measured ----------------------------------------------------


@pytest.mark.parametrize(
    "cls, short, cause",
    [
        ("DropoutBugGPT", "dropout or noise is active in eval", "with the random seed reset before each pass"),
        ("CallCounterGPT", "a call changes calls", "one forward pass changed calls"),
        ("ShallowTrainGPT", "modules left in training mode", "still in training mode after model.eval()"),
    ],
)
def test_eval_determinism_names_the_cause_it_measured(tiny_workspace, user_config, cls, short, cause):
    result = run(tiny_workspace, cls, user_config, only=["eval_determinism"]).by_id()["eval_determinism"]
    assert result.status is Status.FAIL
    assert short in result.summary and "(on the " in result.summary, result.summary
    assert any(c.startswith("measured: ") and cause in c for c in result.causes), result.causes
    if cls == "CallCounterGPT":  # only what was measured is named: no dropout for a counter
        assert "dropout" not in result.summary and "random" not in " ".join(result.causes)


# -- a verdict on fresh weights never contradicts the checkpoint's ------------------------------


def _save_trained(ws, config_path, gate: float) -> None:
    import importlib.util
    import json

    import torch

    from tests.test_checks_usermodel import MODEL_FILE

    spec = importlib.util.spec_from_file_location("tinygpt_for_checkpoint", MODEL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = json.loads(config_path.read_text())
    model = module.AttnGateGPT(module.TinyGPTConfig(**config))
    with torch.no_grad():
        model.attn_gate.fill_(gate)  # what training made of the gate
    payload = {"model_state_dict": model.state_dict(), "config": config, "step": 200}
    for path in (ws.best_checkpoint, ws.latest_checkpoint):
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(payload, path)


@pytest.mark.parametrize("gate, status", [(1.0, Status.PASS), (0.0, Status.FAIL)], ids=["opened", "still shut"])
def test_batch_independence_judges_context_use_on_the_checkpoint_too(tiny_workspace, user_config, gate, status):
    # GIVEN a model whose fresh weights ignore context (a zero gate), and its checkpoint
    _save_trained(tiny_workspace, user_config, gate)
    result = run(tiny_workspace, "AttnGateGPT", user_config, only=["batch_independence"]).by_id()["batch_independence"]
    # THEN an opened gate passes, judged on the checkpoint; a gate still shut fails on both
    assert result.status is status, result.summary
    assert result.values["checkpoint_later_positions_depend_on_the_first"] is (gate == 1.0)
    if status is Status.FAIL:
        assert "on the fresh model or the checkpoint" in result.summary
    else:
        assert "judged on the checkpoint" in result.values["notes"][0]


def test_each_fixture_of_these_bug_kinds_names_its_source_or_says_it_was_written_here():
    import importlib.util

    from tests.test_checks_usermodel import MODEL_FILE

    spec = importlib.util.spec_from_file_location("tinygpt_sources", MODEL_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kinds = (
        "SaturatedGateGPT FrozenLayerScaleGPT KeyBiasGPT StoredScaleGPT RowIndexedGPT SqueezeGPT "
        "CallCounterGPT ShallowTrainGPT AttnGateGPT DropoutBugGPT SoftmaxDimGPT FiniteMaskFillGPT FlippedMaskGPT "
        "SequenceMeanGPT SharedLayersGPT IgnoreZeroGPT"
    ).split()
    for name in kinds:
        doc = getattr(module, name).__doc__ or ""
        assert "Reported: https://" in doc or "Written here:" in doc, name


def test_the_model_property_checks_judge_the_checkpoint_and_say_so(tiny_workspace, user_config):
    _save_trained(tiny_workspace, user_config, 1.0)
    report = run(tiny_workspace, "AttnGateGPT", user_config, only=["causal_independence", "eval_determinism"])
    for cid in ("causal_independence", "eval_determinism"):
        result = report.by_id()[cid]
        assert result.status is Status.PASS, result.summary
        assert result.values["judged"] == "checkpoint step 200" and "(on the checkpoint step 200)" in result.summary
    fresh = run(tiny_workspace, "AttnGateGPT", user_config, only=["eval_determinism"], checkpoint="none")
    assert fresh.by_id()["eval_determinism"].values["judged"] == "fresh model (--checkpoint none)"


@pytest.mark.parametrize(
    "cls, origin",
    [
        ("NoMaskGPT", "the forward of layers.0.attn (its Linear layers.0.attn.out passes on a change made before it)"),
        ("SoftmaxDimGPT", "the forward of layers.0.attn"),
        ("TrainModeLeakGPT", "norm (BatchNorm1d)"),
        ("SequenceMeanGPT", "the forward of the model itself"),
    ],
)
def test_causal_independence_says_where_the_future_enters(tiny_workspace, user_config, cls, origin):
    result = run(tiny_workspace, cls, user_config, only=["causal_independence"]).by_id()["causal_independence"]
    assert result.status is Status.FAIL
    assert result.values["leak_enters_at"].startswith(origin), result.values["leak_enters_at"]
    assert result.causes[0] == f"measured: the leak enters at {result.values['leak_enters_at']}"


def test_batch_independence_says_where_one_row_reaches_another(tiny_workspace, user_config):
    result = run(tiny_workspace, "TrainModeLeakGPT", user_config, only=["batch_independence"]).by_id()[
        "batch_independence"
    ]
    assert result.status is Status.FAIL
    assert result.values["mixing_enters_at"] == "norm (BatchNorm1d)"
    assert result.causes[0] == "measured: row 1 first reaches row 0 at norm (BatchNorm1d)"
