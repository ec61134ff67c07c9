"""Each check seen failing on the fault it exists to catch (those not covered by --inject faults)."""

from __future__ import annotations

import json

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.checks.control import Finished
from minigpt.data.tokenizer import CharTokenizer
from minigpt.io.atomic import atomic_torch_save
from minigpt.io.workspace import Workspace
from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.sample.generate import SamplerSettings


def run(ws, only, **kw):
    kw.setdefault("device", "cpu")
    report = run_checks(CheckContext(CheckOptions(workspace=ws.root, **kw)), only=only)
    return report.by_id()


def test_environment_warns_when_gpu_expected_but_running_on_cpu(tiny_workspace):
    result = run(tiny_workspace, ["environment"], expect_gpu=True)["environment"]
    assert result.status is Status.WARN
    assert "--expect-gpu" in result.summary and result.causes


def test_files_fails_on_missing_tokenizer_and_skips_dependants(tiny_workspace):
    tiny_workspace.tokenizer.unlink()
    results = run(tiny_workspace, ["token_range"])
    assert results["files"].status is Status.FAIL
    assert "missing: tokenizer" in results["files"].summary
    assert results["token_range"].status is Status.SKIP


def test_files_flags_an_empty_file_as_interrupted(tiny_workspace):
    tiny_workspace.ids("train").write_bytes(b"")
    result = run(tiny_workspace, ["files"])["files"]
    assert result.status is Status.FAIL and "too small" in result.summary


def test_tokenizer_roundtrip_fails_on_a_vocabulary_with_duplicates(tiny_workspace):
    chars = json.loads(tiny_workspace.tokenizer.read_text())["chars"]
    tiny_workspace.tokenizer.write_text(json.dumps({"chars": chars + [chars[3]]}))
    result = run(tiny_workspace, ["tokenizer_roundtrip"])["tokenizer_roundtrip"]
    assert result.status is Status.FAIL and "repeats" in result.summary


@pytest.mark.slow
def test_tokenizer_fingerprint_fails_when_same_size_vocabulary_is_reordered(trained_workspace):
    tok = CharTokenizer.from_file(trained_workspace.tokenizer)
    CharTokenizer(list(reversed(tok.chars))).save(trained_workspace.tokenizer)
    result = run(trained_workspace, ["tokenizer_fingerprint"])["tokenizer_fingerprint"]
    assert result.status is Status.FAIL
    assert "same size, different characters" in result.summary


def test_tokenizer_fingerprint_fails_on_vocab_size_mismatch(trained_workspace):
    tok = CharTokenizer.from_file(trained_workspace.tokenizer)
    CharTokenizer(tok.chars + ["\u2603"]).save(trained_workspace.tokenizer)
    result = run(trained_workspace, ["tokenizer_fingerprint"])["tokenizer_fingerprint"]
    assert result.status is Status.FAIL and "vocab_size" in result.summary


def test_decoded_sample_warns_on_constant_fill(tiny_workspace):
    ids = torch.load(tiny_workspace.ids("train"))
    ids[:] = 5
    atomic_torch_save(ids, tiny_workspace.ids("train"))
    result = run(tiny_workspace, ["decoded_sample"])["decoded_sample"]
    assert result.status is Status.WARN and "repeated" in result.summary


def test_batch_dtype_device_fails_on_int32_batches(tiny_workspace, monkeypatch):
    ctx = CheckContext(CheckOptions(workspace=tiny_workspace.root, device="cpu"))
    original = ctx.batch
    monkeypatch.setattr(ctx, "batch", lambda *a, **k: tuple(t.int() for t in original(*a, **k)))
    result = run_checks(ctx, only=["batch_dtype_device"]).by_id()["batch_dtype_device"]
    assert result.status is Status.FAIL and "expected torch.int64" in result.summary


def test_checkpoint_load_fails_on_untrained_weights(trained_workspace):
    tok = CharTokenizer.from_file(trained_workspace.tokenizer)
    payload = torch.load(trained_workspace.best_checkpoint, weights_only=True)
    fresh = MiniGPT(MiniGPTConfig(**payload["config"]))
    payload["model_state_dict"] = fresh.state_dict()
    atomic_torch_save(payload, trained_workspace.best_checkpoint)
    result = run(trained_workspace, ["checkpoint_load"])["checkpoint_load"]
    assert result.status is Status.FAIL
    assert "not clearly below log(V)" in result.summary
    assert tok.vocab_size == payload["config"]["vocab_size"]


def test_checkpoint_load_fails_with_typed_error_on_truncated_file(trained_workspace):
    data = trained_workspace.best_checkpoint.read_bytes()
    trained_workspace.best_checkpoint.write_bytes(data[: len(data) // 2])
    result = run(trained_workspace, ["checkpoint_load"])["checkpoint_load"]
    assert result.status is Status.FAIL and "truncated" in result.summary


def test_training_curve_fails_on_flat_loss(trained_workspace):
    lines = [json.dumps({"step": s, "train_loss": 4.6, "lr": 1e-3}) for s in range(1, 200)]
    trained_workspace.metrics.write_text("\n".join(lines) + "\n")
    result = run(trained_workspace, ["training_curve"])["training_curve"]
    assert result.status is Status.FAIL and result.summary.startswith("flat")


def test_training_curve_fails_on_divergence_naming_the_step(trained_workspace):
    lines = [json.dumps({"step": s, "train_loss": 4.0 - s / 100, "lr": 1e-3}) for s in range(1, 60)]
    lines.append(json.dumps({"step": 60, "train_loss": "nan", "lr": 0.5, "nonfinite": True}))
    trained_workspace.metrics.write_text("\n".join(lines) + "\n")
    result = run(trained_workspace, ["training_curve"])["training_curve"]
    assert result.status is Status.FAIL and "60" in result.summary


def test_sampler_settings_fails_on_negative_temperature_and_warns_on_heavy_penalty(tiny_workspace):
    bad = run(tiny_workspace, ["sampler_settings"], sampler=SamplerSettings(temperature=-1))["sampler_settings"]
    assert bad.status is Status.FAIL and "temperature" in bad.summary
    odd = run(tiny_workspace, ["sampler_settings"], sampler=SamplerSettings(repetition_penalty=1.5))["sampler_settings"]
    assert odd.status is Status.WARN and "1.3" in odd.summary


def test_only_pulls_in_dependencies_and_skip_is_honoured(tiny_workspace):
    report = run_checks(
        CheckContext(CheckOptions(workspace=tiny_workspace.root, device="cpu")),
        only=["batch_shift"],
        skip=["decoded_sample"],
    )
    assert [r.id for r in report.results] == ["files", "tokenizer_roundtrip", "token_range", "batch_shift"]


def test_cancel_stops_before_the_next_check(tiny_workspace):
    import threading

    cancel = threading.Event()
    seen = []

    def listener(event):
        if isinstance(event, Finished):
            seen.append(event.result.id)
            cancel.set()

    report = run_checks(
        CheckContext(CheckOptions(workspace=tiny_workspace.root, device="cpu")), listener=listener, cancel=cancel
    )
    assert report.cancelled and seen == ["environment"]


def test_a_loop_that_has_not_logged_yet_is_not_a_files_fault(tmp_path):
    # GIVEN a watch just opened on a fresh folder: its metrics log exists and is empty
    import minigpt

    model = torch.nn.Linear(4, 4)
    with minigpt.watch(model, torch.optim.SGD(model.parameters(), lr=0.1), workspace=tmp_path / "run"):
        assert Workspace(tmp_path / "run").metrics.stat().st_size == 0
        # WHEN the files check runs THEN it reads a watched loop's folder, not an empty-file fault
        files = run_checks(CheckContext(CheckOptions(workspace=tmp_path / "run")), only=["files"]).by_id()["files"]
    assert files.status is Status.SKIP and "watched loop's folder" in files.summary, files.summary
    assert "too small" not in files.summary
