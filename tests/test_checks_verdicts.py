"""Verdicts that must not mix up runs or hide behind internal errors, and the data-split checks
on real text in both directions."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.data.prepare import prepare_workspace
from minigpt.io.atomic import atomic_torch_save
from minigpt.logs.curve import SHAPE_SEVERITY


def run(ws_root, only=None, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("skip_overfit", True)
    return run_checks(CheckContext(CheckOptions(workspace=ws_root, **kw)), only=only)


# -- split_overlap / split_vocabulary ---------------------------------------------------------


def test_real_wikitext_splits_do_not_leak_and_share_their_characters(tmp_path, wikitext_dir):
    prepare_workspace(wikitext_dir, tmp_path / "wt")
    report = run(tmp_path / "wt", only=["split_overlap", "split_vocabulary"])
    overlap, vocab = report.by_id()["split_overlap"], report.by_id()["split_vocabulary"]
    assert overlap.status is Status.PASS, overlap.summary
    assert overlap.values["splits"]["val"]["share"] < 0.05
    # WikiText-2 has a few rare characters outside train (e.g. '¥'): named, but below the warning share
    assert vocab.status is Status.PASS and "never in train" in vocab.summary


def test_prose_val_split_passes_and_the_repeated_pydoc_topics_in_test_are_found(tiny_workspace):
    # the pydoc topic texts repeat whole paragraphs across topics; the last 5% (the test split)
    # shares about a third of its 64-character windows with the rest: a real leak the check must see
    report = run(tiny_workspace.root, only=["split_overlap", "split_vocabulary"])
    overlap = report.by_id()["split_overlap"]
    assert overlap.status is Status.WARN and "test" in overlap.summary
    assert overlap.values["splits"]["val"]["share"] < 0.05 <= overlap.values["splits"]["test"]["share"]
    assert report.by_id()["split_vocabulary"].status is Status.PASS
    tiny_workspace.ids("test").unlink()
    assert run(tiny_workspace.root, only=["split_overlap"]).by_id()["split_overlap"].status is Status.PASS


def test_identical_val_and_train_fail_split_overlap(tiny_workspace):
    shutil.copy(tiny_workspace.ids("train"), tiny_workspace.ids("val"))
    result = run(tiny_workspace.root, only=["split_overlap"]).by_id()["split_overlap"]
    assert result.status is Status.FAIL and "val is identical to train" in result.summary


def test_val_that_copies_a_tenth_of_train_windows_warns_with_examples(tiny_workspace):
    # GIVEN a val split where every 8th 100-token chunk was copied from train (a leaky split)
    train, val = torch.load(tiny_workspace.ids("train")), torch.load(tiny_workspace.ids("val")).clone()
    for start in range(0, val.numel() - 100, 800):
        val[start : start + 100] = train[5000 + start : 5100 + start]
    atomic_torch_save(val, tiny_workspace.ids("val"))
    result = run(tiny_workspace.root, only=["split_overlap"]).by_id()["split_overlap"]
    # THEN about an eighth of the probe windows are found, which is a warning that shows where
    assert result.status is Status.WARN, result.summary
    assert 0.05 <= result.values["splits"]["val"]["share"] < 0.5
    assert result.values["splits"]["val"]["examples"][0]["text"]


def test_val_characters_that_train_never_shows_warn_and_are_named(tiny_workspace):
    # GIVEN a val split where 1% of the tokens are a character that train never holds
    train, val = torch.load(tiny_workspace.ids("train")), torch.load(tiny_workspace.ids("val")).clone()
    from minigpt.data.tokenizer import CharTokenizer

    vocab = CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size
    missing = int(torch.bincount(train, minlength=vocab).argmin())  # the rarest character, then removed from train
    train = train[train != missing]
    val[:: max(1, val.numel() // 100)] = missing
    atomic_torch_save(train.clone(), tiny_workspace.ids("train"))
    atomic_torch_save(val, tiny_workspace.ids("val"))
    result = run(tiny_workspace.root, only=["split_vocabulary"]).by_id()["split_vocabulary"]
    assert result.status is Status.WARN, result.summary
    unseen = result.values["splits"]["val"]["unseen_characters"]
    assert unseen[0]["id"] == missing and unseen[0]["count"] >= 100


# -- no mixed runs, no internal errors ---------------------------------------------------------


def test_a_checkpoint_with_nan_weights_skips_generation_instead_of_an_internal_error(trained_workspace):
    data = torch.load(trained_workspace.best_checkpoint, weights_only=True)
    next(iter(data["model_state_dict"].values())).view(-1)[0] = float("nan")
    atomic_torch_save(data, trained_workspace.best_checkpoint)
    report = run(trained_workspace.root)
    by_id = report.by_id()
    assert by_id["checkpoint_load"].status is Status.FAIL
    assert by_id["generation_repetition"].status is Status.SKIP
    assert "non-finite" in by_id["generation_repetition"].summary
    assert not [r.id for r in report.results if r.status is Status.ERROR]


def test_a_checkpoint_replaced_on_disk_is_read_again_and_named_in_the_report(trained_workspace, tmp_path):
    ctx = CheckContext(CheckOptions(workspace=trained_workspace.root, device="cpu", skip_overfit=True))
    first = run_checks(ctx, only=["checkpoint_load"])
    step_before = first.by_id()["checkpoint_load"].values["step"]
    assert first.judged_file("checkpoint").step == step_before
    # WHEN another run replaces the checkpoint (a different step) while the context is cached
    data = torch.load(trained_workspace.best_checkpoint, weights_only=True)
    data["step"] = step_before + 1000
    atomic_torch_save(data, trained_workspace.best_checkpoint)
    os.utime(trained_workspace.best_checkpoint, (1e9, 1e9))  # a different mtime even on coarse clocks
    second = run_checks(ctx, only=["checkpoint_load"])
    # THEN the next report judges the new file, never the cached copy
    assert second.by_id()["checkpoint_load"].values["step"] == step_before + 1000
    assert second.judged_file("checkpoint").step == step_before + 1000
    assert second.judged_file("checkpoint").mtime == pytest.approx(1e9)


def test_a_checkpoint_moved_away_between_runs_means_a_fresh_model_not_the_cached_one(trained_workspace):
    ctx = CheckContext(CheckOptions(workspace=trained_workspace.root, device="cpu", skip_overfit=True))
    assert run_checks(ctx, only=["checkpoint_load"]).by_id()["checkpoint_load"].status is Status.PASS
    shutil.move(trained_workspace.checkpoints, trained_workspace.root / "previous")
    again = run_checks(ctx, only=["checkpoint_load"])
    assert again.by_id()["checkpoint_load"].status is Status.SKIP
    assert again.judged_file("checkpoint") is None


# -- training_curve on the real curves of tests/fixtures/curves --------------------------------

CURVES = Path(__file__).parent / "fixtures" / "curves"
EXPECTED = json.loads((CURVES / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def demo_workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("curves") / "ws"  # the corpus the fixtures were trained on (vocab 103)
    prepare_workspace("demo", root)
    return root


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_training_curve_check_gives_each_real_run_its_shape_and_status(demo_workspace, name):
    expected = EXPECTED[name]
    (demo_workspace / "logs").mkdir(exist_ok=True)
    shutil.copy(CURVES / f"{name}.jsonl", demo_workspace / "logs" / "metrics.jsonl")
    result = run(demo_workspace, only=["training_curve"]).by_id()["training_curve"]
    assert result.values["shape"] == expected["shape"], result.summary
    assert result.status.value == SHAPE_SEVERITY[expected["shape"]], result.summary
    assert result.summary.startswith(expected["shape"] + ":")
    if result.values["shape"] in ("unstable", "diverged"):  # the loss rose: never advise raising the rate
        assert not any("raise the learning rate" in f for f in result.fixes), result.fixes


# -- training_curve on a TensorBoard log ------------------------------------------------------


def test_training_curve_reads_a_tensorboard_run_written_by_summarywriter(demo_workspace, tmp_path):
    pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")
    from torch.utils.tensorboard import SummaryWriter

    # GIVEN the real lr=3 run (a blow-up), logged the way a SummaryWriter user logs it
    rows = [json.loads(line) for line in (CURVES / "lr_3_noclip.jsonl").read_text().splitlines() if line.strip()]
    writer = SummaryWriter(str(tmp_path / "tb"))
    for r in rows:
        if isinstance(r.get("train_loss"), (int, float)):
            writer.add_scalar("train/loss", r["train_loss"], r["step"])
        if isinstance(r.get("val_loss"), (int, float)):
            writer.add_scalar("val/loss", r["val_loss"], r["step"])
        if isinstance(r.get("lr"), (int, float)):
            writer.add_scalar("train/lr", r["lr"], r["step"])
    writer.close()
    # WHEN training_curve reads the event folder
    report = run(demo_workspace, only=["training_curve"], metrics=tmp_path / "tb")
    result = report.by_id()["training_curve"]
    # THEN it gives the same verdict as on the JSONL, and the report names the folder it judged
    assert result.values["shape"] == EXPECTED["lr_3_noclip"]["shape"] and result.status is Status.FAIL
    assert report.judged_file("metrics").path == str(tmp_path / "tb")


def test_a_tensorboard_folder_without_loss_scalars_is_a_clear_failure(demo_workspace, tmp_path):
    pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "tb"))
    writer.add_scalar("accuracy", 0.5, 1)
    writer.close()
    result = run(demo_workspace, only=["training_curve"], metrics=tmp_path / "tb").by_id()["training_curve"]
    assert result.status is Status.FAIL and "No loss scalars" in result.summary


def test_without_the_extra_a_tensorboard_log_names_the_install_command(tmp_path, monkeypatch):
    import sys as _sys

    from minigpt.errors import DataError
    from minigpt.logs.tensorboard import read_tensorboard

    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"")
    monkeypatch.setitem(_sys.modules, "tensorboard.compat.proto.event_pb2", None)
    with pytest.raises(DataError, match=r"minigpt-tui\[tensorboard\]"):
        read_tensorboard(tmp_path)


# -- the files check names what is wrong with a file ----------------------------------------


def test_files_check_names_a_symlink_loop_instead_of_calling_it_missing(tiny_workspace):
    tok = tiny_workspace.tokenizer
    tok.unlink()
    tok.symlink_to(tok.with_name("loop.json"))
    tok.with_name("loop.json").symlink_to(tok)
    result = run(tiny_workspace.root, only=["files"]).by_id()["files"]
    assert result.status is Status.FAIL and "symlink loop" in result.summary


def test_a_tiny_tokenizer_with_a_repeated_character_is_named_by_its_loader_not_called_too_small(tiny_workspace):
    tiny_workspace.tokenizer.write_text('{"chars": ["a", "a"]}', encoding="utf-8")
    report = run(tiny_workspace.root, only=["tokenizer_roundtrip"])
    assert report.by_id()["files"].status is Status.PASS
    roundtrip = report.by_id()["tokenizer_roundtrip"]
    assert roundtrip.status is Status.FAIL and "repeats" in roundtrip.summary
