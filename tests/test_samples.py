"""Samples by step (logs/samples.jsonl): written by our trainer and by the watch, judged by
sample_structure against the data's own characters and words."""

from __future__ import annotations

import json

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.data.tokenizer import CharTokenizer
from minigpt.logs.samples import SAMPLE_SETTINGS, Yardstick, read_samples
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer
from tests.conftest import build_workspace
from tests.fixtures import loops
from tests.test_loop_checks import LOOP_IDS, not_clean


def judge(root, only=("sample_structure",)):
    return run_checks(CheckContext(CheckOptions(workspace=root, device="cpu")), only=list(only))


def demo_text() -> str:
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))[:300_000]  # what loops.demo_ids encodes


def test_our_trainer_writes_a_sample_at_step_0_and_at_each_evaluation(trained_workspace):
    samples = read_samples(trained_workspace.samples)
    assert [s.step for s in samples] == [0, 40, 80, 120]  # debug preset, eval_interval 40
    assert all(len(s.text) == SAMPLE_SETTINGS.max_new_tokens and s.prompt == "The " for s in samples)
    assert samples[0].val_loss is None and all(s.val_loss is not None for s in samples[1:])
    result = judge(trained_workspace.root).by_id()["sample_structure"]
    assert result.status is Status.PASS, result.summary
    assert result.summary.startswith("samples reached") and "step 0 -> 120 (4 samples)" in result.summary
    assert result.values["last"]["char_fit"] > result.values["first"]["char_fit"] + 0.3


@pytest.mark.slow
def test_a_resumed_run_rewrites_the_samples_after_its_checkpoint(tiny_workspace):
    cfg = TrainConfig.from_preset("debug", max_steps=60, eval_interval=30, device="cpu")
    Trainer(tiny_workspace.root, cfg).run()
    with open(tiny_workspace.samples, "a", encoding="utf-8") as fh:  # a crash after step 60's sample
        fh.write(json.dumps({"step": 75, "prompt": "The ", "text": "lost"}) + "\n")
    cfg = TrainConfig.from_preset("debug", max_steps=90, eval_interval=30, device="cpu")
    Trainer(tiny_workspace.root, cfg, resume=True, overrides={"max_steps": 90}).run()
    assert [s.step for s in read_samples(tiny_workspace.samples)] == [0, 30, 60, 90]


def test_the_samples_reader_skips_what_is_not_a_sample(tmp_path):
    path = tmp_path / "samples.jsonl"
    lines = [
        {"step": 0, "text": "noise"},
        "not json",
        {"step": "1", "text": "a string step"},
        {"step": 2, "text": 3},
        {"step": 4, "text": "x" * 70_000},  # over the line cap: skipped, never read whole
        {"step": 5, "text": "words", "val_loss": 2.5},
        {"step": 5, "text": "rewritten by a resume"},
    ]
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    samples = read_samples(path)
    assert [(s.step, s.text) for s in samples] == [(0, "noise"), (5, "rewritten by a resume")]
    assert read_samples(tmp_path / "missing.jsonl") == []


def test_structure_is_measured_against_the_data_itself():
    yard = Yardstick.of(demo_text())
    real = yard.measure("The object is returned by the function when the argument is a string.")
    noise = yard.measure('Zb8krzt\'N6FjFKw)G"S  oux^hDWWi^x??>hqSv0xYWR|zJsr>#^"]lpkt?){{i{ YzKoS')
    letters = yard.measure("te n retexoleje s)h aoug hirW iax ht ta ibeenssrt lpstatiri rntovinelpte")
    assert real.word_fit > 0.9 and real.char_fit > 0.9
    assert noise.word_fit < 0.1 and noise.char_fit < 0.7
    assert letters.char_fit > 0.9 and letters.word_fit < 0.3  # the data's characters, not yet its words


@pytest.mark.slow
def test_a_watched_loop_writes_samples_and_a_mismatched_tokenizer_is_named(tmp_path):
    # GIVEN a nanoGPT-style loop watched with the run's tokenizer: samples at step 0, every 50 steps, at close
    good = build_workspace(tmp_path / "good", demo_text())
    loops.nanogpt_loop(good.root, max_iters=150, tokenizer=good.tokenizer, sample_every=50)
    assert [s.step for s in read_samples(good.samples)] == [0, 50, 100, 150]
    report = judge(good.root, [*LOOP_IDS, "sample_structure"])
    assert not not_clean(report)  # drawing samples left no trace in the loop checks
    assert report.by_id()["sample_structure"].status is Status.PASS
    # WHEN the same loop is watched with another tokenizer file (a vocabulary in another order)
    bad = build_workspace(tmp_path / "bad", demo_text())
    tok = CharTokenizer.from_file(bad.tokenizer)
    CharTokenizer(list(reversed(tok.chars))).save(tmp_path / "other.json")
    loops.nanogpt_loop(bad.root, max_iters=150, tokenizer=tmp_path / "other.json", sample_every=50)
    report = judge(bad.root, [*LOOP_IDS, "sample_structure"])
    # THEN the samples stay noise: sample_structure says so, naming another tokenizer, and nothing else complains
    result = report.by_id()["sample_structure"]
    assert result.status is Status.WARN and "did not grow more structured, still noise" in result.summary
    assert any("another model or tokenizer" in c for c in result.causes)
    assert set(not_clean(report)) == {"sample_structure"}


@pytest.mark.slow
def test_a_loop_that_learns_to_copy_writes_samples_that_never_structure(tmp_path):
    ws = build_workspace(tmp_path / "run", demo_text())
    loops.nanogpt_loop(ws.root, bug="targets_equal_inputs", max_iters=150, tokenizer=ws.tokenizer, sample_every=50)
    result = judge(ws.root).by_id()["sample_structure"]
    assert result.status is Status.WARN, result.summary
    assert "did not grow more structured" in result.summary and "loop_targets_shifted" in " ".join(result.causes)


def test_a_model_that_cannot_generate_turns_sampling_off_and_the_watch_goes_on(tmp_path, capsys):
    import io

    import minigpt

    ws = build_workspace(tmp_path / "run", demo_text()[:20_000])
    model = torch.nn.Sequential(torch.nn.Embedding(CharTokenizer.from_file(ws.tokenizer).vocab_size, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    err = io.StringIO()
    with minigpt.watch(model, opt, workspace=ws.root, tokenizer=ws.tokenizer, stderr=err) as watch:
        for _ in range(3):
            model(torch.zeros(2, 4, dtype=torch.long)).sum().backward()
            opt.step()
            opt.zero_grad()
        assert watch.active
    assert "minigpt.watch: no samples (" in err.getvalue() and err.getvalue().count("no samples") == 1
    assert not ws.samples.exists() or read_samples(ws.samples) == []
    assert any(json.loads(line).get("kind") == "step" for line in ws.loop_log.read_text().splitlines())
