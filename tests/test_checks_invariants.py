"""Properties every correct causal LM has: healthy variations practitioners use pass (z-loss, label
smoothing, a term independent of the logits, a padded vocabulary), and each broken property fails
its own check, naming what was measured, with nothing unrelated failing.

The models are tests/fixtures/designs/variants.py: one GPT written the common way and subclasses
that each change one thing, imported nothing from minigpt.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.data.tokenizer import CharTokenizer
from minigpt.io.atomic import atomic_torch_save
from minigpt.model.gpt import MiniGPT, MiniGPTConfig

VARIANTS = Path(__file__).parent / "fixtures" / "designs" / "variants.py"
SHAPE = {"block_size": 32, "n_embd": 64, "n_head": 4, "n_layer": 2, "dropout": 0.0}


def config_file(ws, tmp_path, **changes) -> Path:
    vocab = CharTokenizer.from_file(ws.tokenizer).vocab_size
    path = tmp_path / "variant_config.json"
    path.write_text(json.dumps({"vocab_size": vocab, **SHAPE, **changes}))
    return path


def run(ws, tmp_path, cls, only=None, config=None, **kw):
    opts = CheckOptions(
        workspace=ws.root,
        checkpoint="none",
        model_spec=f"{VARIANTS}:{cls}",
        config_path=config or config_file(ws, tmp_path),
        device="cpu",
        skip_overfit=kw.pop("skip_overfit", True),
        **kw,
    )
    return run_checks(CheckContext(opts), only=only)


def failed(report) -> dict[str, str]:
    return {r.id: r.summary for r in report.results if r.status in (Status.FAIL, Status.ERROR)}


@pytest.mark.parametrize(
    "cls, phrase",
    [
        ("VariantGPT", "= mean next-token cross-entropy of its logits"),
        ("ZLossGPT", "z-loss 0.0001 * logsumexp^2"),
        ("LabelSmoothingGPT", "label smoothing 0.1"),
        ("WeightPenaltyGPT", "does not depend on the logits"),
    ],
)
def test_a_loss_with_a_deliberate_term_passes_naming_the_term(tiny_workspace, tmp_path, cls, phrase):
    report = run(tiny_workspace, tmp_path, cls)
    assert failed(report) == {}
    loss = report.by_id()["loss_matches_logits"]
    assert loss.status is Status.PASS and phrase in loss.summary, loss.summary


def test_z_loss_and_smoothing_are_fitted_to_their_coefficients(tiny_workspace, tmp_path):
    z = run(tiny_workspace, tmp_path, "ZLossGPT", ["loss_matches_logits"]).by_id()["loss_matches_logits"]
    smooth = run(tiny_workspace, tmp_path, "LabelSmoothingGPT", ["loss_matches_logits"]).by_id()["loss_matches_logits"]
    assert z.values["known_terms"] == {"z_loss": pytest.approx(1e-4, rel=1e-2)}
    assert smooth.values["known_terms"] == {"label_smoothing": pytest.approx(0.1, rel=1e-3)}


def test_a_loss_fed_probabilities_still_fails_and_no_term_explains_it(tiny_workspace, tmp_path):
    report = run(tiny_workspace, tmp_path, "VariantGPT", ["loss_matches_logits"], fault="softmax_loss")
    loss = report.by_id()["loss_matches_logits"]
    assert loss.status is Status.FAIL and "probabilities" in loss.summary
    assert "known_terms" not in loss.values


@pytest.mark.slow
def test_label_smoothing_memorises_one_batch_judged_on_its_logits(tiny_workspace, tmp_path):
    # a smoothed loss cannot fall near zero however well the batch is memorised: the logits' own
    # cross-entropy can
    report = run(tiny_workspace, tmp_path, "LabelSmoothingGPT", ["single_batch_overfit"], skip_overfit=False)
    overfit = report.by_id()["single_batch_overfit"]
    assert overfit.status is Status.PASS, overfit.summary


def test_a_padded_vocabulary_passes_with_the_padding_measured(tiny_workspace, tmp_path):
    vocab = CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size
    padded = ((vocab + 63) // 64) * 64
    report = run(
        tiny_workspace, tmp_path, "VariantGPT", config=config_file(tiny_workspace, tmp_path, vocab_size=padded)
    )
    assert failed(report) == {}
    shapes = report.by_id()["forward_shapes"]
    assert f"padded vocabulary: {padded - vocab} rows past the tokenizer's {vocab}" in shapes.summary
    assert 0 < shapes.values["padded_rows_probability"] < 1
    # a fresh model spreads its guess over every row it has: the baseline is log(padded)
    assert report.by_id()["initial_loss"].values["expected_baseline"] == pytest.approx(math.log(padded))


def pad_checkpoint(ws, rows_like: str) -> int:
    """Pad the trained checkpoint's vocabulary to a multiple of 64. The new rows copy the row of the
    token the model finds least likely (as training pushes rows that are never targets down), or most
    likely (as rows a run did train on would be)."""
    payload = torch.load(ws.best_checkpoint, weights_only=True)
    config = dict(payload["config"])
    vocab = config["vocab_size"]
    model = MiniGPT(MiniGPTConfig(**config))
    model.load_state_dict(payload["model_state_dict"])
    ids = torch.load(ws.ids("train"))[: config["block_size"]].long()[None]
    with torch.no_grad():
        probs = model(ids)[0].softmax(-1).mean(dim=(0, 1))
    source = int(probs.argmin() if rows_like == "least likely" else probs.argmax())
    padded = ((vocab + 63) // 64) * 64
    config["vocab_size"] = padded
    bigger = MiniGPT(MiniGPTConfig(**config))
    state = dict(payload["model_state_dict"])
    for name in ("token_embedding.weight", "lm_head.weight"):
        old = state[name]
        state[name] = torch.cat([old, old[source].expand(padded - vocab, -1)])
    bigger.load_state_dict(state)
    payload.update(config=config, model_state_dict=bigger.state_dict())
    atomic_torch_save(payload, ws.best_checkpoint)
    return padded


def test_a_checkpoint_with_a_padded_vocabulary_matches_its_tokenizer(trained_workspace):
    padded = pad_checkpoint(trained_workspace, "least likely")
    opts = CheckOptions(workspace=trained_workspace.root, device="cpu", skip_overfit=True)
    report = run_checks(CheckContext(opts))
    fingerprint = report.by_id()["tokenizer_fingerprint"]
    assert fingerprint.status is Status.PASS and f"model vocab_size {padded} pads it" in fingerprint.summary
    assert failed(report) == {}


def test_a_tokenizer_smaller_than_the_runs_fails_on_the_probability_the_model_gives_the_extra_ids(
    trained_workspace,
):
    pad_checkpoint(trained_workspace, "most likely")
    opts = CheckOptions(workspace=trained_workspace.root, device="cpu")
    fingerprint = run_checks(CheckContext(opts), only=["tokenizer_fingerprint"]).by_id()["tokenizer_fingerprint"]
    assert fingerprint.status is Status.FAIL and "trained with a larger vocabulary" in fingerprint.summary


@pytest.mark.parametrize(
    "cls, check, phrase",
    [
        ("RepeatedBlockGPT", "shared_modules", "blocks.0 = blocks.1"),
        ("LooseTensorGPT", "state_dict_complete", "pos_table differs between the two builds"),
        ("BatchAxisGPT", "batch_independence", "rows of a batch see each other"),
    ],
)
def test_a_broken_property_fails_its_own_check_and_no_other(tiny_workspace, tmp_path, cls, check, phrase):
    report = run(tiny_workspace, tmp_path, cls)
    assert set(failed(report)) == {check}, failed(report)
    assert phrase in report.by_id()[check].summary, report.by_id()[check].summary


def test_attention_along_the_batch_axis_is_named_from_what_was_measured(tiny_workspace, tmp_path):
    result = run(tiny_workspace, tmp_path, "BatchAxisGPT", ["batch_independence"]).by_id()["batch_independence"]
    assert "each row depends on the rows before it" in result.summary
    assert "no position depends on earlier tokens" in result.summary
    assert result.causes[0].startswith("measured: row ") and " first reaches row " in result.causes[0]
    assert result.causes[1].startswith("attention runs along the batch axis instead of time")
    assert result.values["later_positions_depend_on_the_first"] is False


def test_dropout_given_as_a_keep_probability_fails_naming_where(tiny_workspace, tmp_path):
    config = config_file(tiny_workspace, tmp_path, dropout=0.9)
    report = run(tiny_workspace, tmp_path, "VariantGPT", config=config)
    rates = report.by_id()["dropout_rates"]
    assert rates.status is Status.FAIL and "keep probability" in rates.causes[0]
    assert "p = 0.9 in config dropout" in rates.summary
    assert rates.values["rates"]["blocks.0.drop (Dropout)"] == 0.9
    assert rates.fixes == ["dropout = 0.1 (p is the probability of dropping a unit)"]
    assert set(failed(report)) == {"dropout_rates"}, failed(report)


def test_usual_dropout_rates_pass(tiny_workspace, tmp_path):
    config = config_file(tiny_workspace, tmp_path, dropout=0.1)
    rates = run(tiny_workspace, tmp_path, "VariantGPT", ["dropout_rates"], config=config).by_id()["dropout_rates"]
    assert rates.status is Status.PASS and "p = 0.1 in config dropout" in rates.summary
