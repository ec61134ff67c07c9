"""Model bugs the checks used to miss, each seen failing and its healthy base passing: a loss that
drops a class of targets, positions that are only right at the training length, embedding rows
of real tokens that can never learn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.data.tokenizer import CharTokenizer

FILE = Path(__file__).parent / "fixtures" / "probe_bugs.py"
CHECKS = [
    "forward_shapes",
    "loss_matches_logits",
    "initial_loss",
    "causal_independence",
    "eval_determinism",
    "gradients",
]


@pytest.fixture
def config(tiny_workspace, tmp_path) -> tuple[Path, CharTokenizer]:
    tok = CharTokenizer.from_file(tiny_workspace.tokenizer)
    path = tmp_path / "config.json"
    pad = tok.encode(" ")[0]  # the commonest character: a real token
    path.write_text(json.dumps({"vocab_size": tok.vocab_size, "pad_id": pad}))
    return path, tok


def run(ws, cls: str, config: Path):
    opts = CheckOptions(workspace=ws.root, model_spec=f"{FILE}:{cls}:GPTConfig", config_path=config, device="cpu")
    return run_checks(CheckContext(opts), only=CHECKS)


def alarms(report) -> dict[str, str]:
    return {r.id: r.summary for r in report.results if r.status in (Status.FAIL, Status.ERROR, Status.WARN)}


def test_the_healthy_base_passes_all_three_probes(tiny_workspace, config):
    report = run(tiny_workspace, "GPT", config[0])
    assert alarms(report) == {}
    by_id = report.by_id()
    assert by_id["loss_matches_logits"].values["positions_not_scored"] == 0
    assert "agree" in by_id["causal_independence"].values["prefix_probe"]


@pytest.mark.parametrize(
    "cls, check, phrase",
    [
        ("PadIgnored", "loss_matches_logits", "the loss ignores every target ' '"),
        ("RareClassMasked", "loss_matches_logits", "the loss ignores every target"),
        ("PositionsFromTheEnd", "causal_independence", "positions depend on the length"),
        ("PaddingRow", "gradients", "padding_idx="),
        ("ClampedIds", "gradients", "never looked up in the embedding"),
    ],
)
def test_each_bug_fails_its_check_and_no_other(tiny_workspace, config, cls, check, phrase):
    report = run(tiny_workspace, cls, config[0])
    found = alarms(report)
    assert set(found) == {check}, found
    assert phrase in found[check]


def test_a_rare_class_dropped_is_caught_though_the_loss_is_near_the_full_mean(tiny_workspace, config):
    result = run(tiny_workspace, "RareClassMasked", config[0]).by_id()["loss_matches_logits"]
    own, full = result.values["model_loss"], result.values["cross_entropy_of_logits"]
    assert result.values["classes_never_scored"]
    assert abs(own - full) < 0.05  # the mean alone would hardly tell
