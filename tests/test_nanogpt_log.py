"""nanoGPT's stdout log imported as logs/metrics.jsonl, with the learning rate its settings gave,
and the run's whole training config kept and shown."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.cli import main
from minigpt.data.corpus import demo_text
from minigpt.errors import DataError
from minigpt.importers.nanogpt import import_nanogpt
from minigpt.importers.nanogpt_log import nanogpt_lr, read_nanogpt_log
from minigpt.io.workspace import Workspace
from minigpt.logs.metrics import read_metrics
from minigpt.logs.record import json_line

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import nanogpt_writer  # noqa: E402

NANOGPT_MODEL = Path(__file__).parent / "fixtures" / "nanogpt_writer.py"


@pytest.fixture(scope="module")
def run_with_log(tmp_path_factory):
    """nanoGPT trained 30 iterations (4 x 64, block 32, no bias), its stdout saved, its lrs recorded."""
    root = tmp_path_factory.mktemp("nanogpt_log")
    data_dir, out_dir, log = root / "data" / "demo_char", root / "out", root / "train.log"
    nanogpt_writer.prepare_char(demo_text()[:60_000], data_dir)
    lrs: list[float] = []
    nanogpt_writer.train(
        data_dir, out_dir, max_iters=30, eval_interval=10, block_size=32, n_layer=4, n_embd=64,
        log_file=log, lrs=lrs,
    )  # fmt: skip
    return out_dir, data_dir, log, lrs


def test_log_lines_become_one_record_per_step_with_nanogpts_lr(run_with_log):
    out_dir, _, log, lrs = run_with_log
    import torch

    config = torch.load(out_dir / "ckpt.pt", weights_only=True)["config"]
    parsed = read_nanogpt_log(log, config)
    assert parsed.iter_lines == 31 and parsed.eval_lines == 4  # iters 0..30; evals at 0, 10, 20, 30
    steps = [r["step"] for r in parsed.records]
    assert steps == list(range(31))
    at10 = parsed.records[10]
    assert set(at10) >= {"train_loss", "val_loss", "eval_train_loss", "lr"}
    assert "val_loss" not in parsed.records[11]
    assert [r["lr"] for r in parsed.records] == pytest.approx(lrs)  # nanoGPT's get_lr, reproduced
    assert parsed.other_lines >= 2  # "tokens per iteration", "saving checkpoint to ..."


def test_nanogpt_lr_follows_warmup_and_cosine():
    cfg = {"learning_rate": 1e-3, "warmup_iters": 10, "lr_decay_iters": 110, "min_lr": 1e-4, "decay_lr": True}
    assert nanogpt_lr(0, cfg) == pytest.approx(1e-3 / 11)
    assert nanogpt_lr(10, cfg) == pytest.approx(1e-3)
    assert nanogpt_lr(60, cfg) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert nanogpt_lr(500, cfg) == pytest.approx(1e-4)
    assert nanogpt_lr(7, {**cfg, "decay_lr": False}) == 1e-3
    assert nanogpt_lr(7, {"warmup_iters": 1}) is None


def test_nan_losses_and_a_resumed_run_are_kept(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(
        "step 0: train loss 4.2000, val loss 4.2100\niter 0: loss 4.1900, time 10.00ms, mfu -100.00%\n"
        "iter 1: loss nan, time 10.00ms, mfu -100.00%\n"
        "Resuming training from out\nstep 0: train loss 4.0000, val loss 4.0500\niter 0: loss 4.0100\n"
    )
    parsed = read_nanogpt_log(log)
    assert [r["step"] for r in parsed.records] == [0, 1, 0]
    assert json.loads(json_line(parsed.records[1]))["train_loss"] == "nan"  # the metrics log's spelling
    assert parsed.lr_source is None and "lr" not in parsed.records[0]


def test_a_file_with_no_nanogpt_line_is_refused(tmp_path):
    log = tmp_path / "other.log"
    log.write_text("Epoch 1/10 loss=2.3\n")
    with pytest.raises(DataError, match="No nanoGPT log lines"):
        read_nanogpt_log(log)


def test_import_with_log_writes_metrics_and_keeps_the_settings(run_with_log, tmp_path, capsys):
    out_dir, data_dir, log, _ = run_with_log
    ws = tmp_path / "ws"
    code = main(["import", "nanogpt", "--workspace", str(ws), "--out-dir", str(out_dir), "--data-dir",
                 str(data_dir), "--log", str(log)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "learning_rate 0.001" in out and "grad_clip 1.0" in out and "warmup_iters 5" in out
    assert "31 steps from" in out
    points = read_metrics(Workspace(ws).metrics).points
    assert len(points) == 31 and points[10].val_loss is not None and points[3].lr is not None


def test_imported_run_is_judged_with_its_log_and_settings(run_with_log, tmp_path):
    out_dir, data_dir, log, _ = run_with_log
    ws = tmp_path / "ws"
    summary = import_nanogpt(out_dir, data_dir, ws, log=log)
    assert summary.settings["learning_rate"] == 1e-3 and summary.settings["grad_clip"] == 1.0
    assert summary.log_records == 31
    ctx = CheckContext(CheckOptions(workspace=ws, device="cpu", skip_overfit=True))
    settings = ctx.run_settings()
    assert settings is not None and settings.grad_clip == 1.0 and settings.learning_rate == 1e-3
    report = run_checks(ctx, only=["training_curve"])
    result = report.by_id()["training_curve"]
    assert result.status is not Status.SKIP
    assert result.values["points"] == 31 and result.values["peak_lr"] == pytest.approx(1e-3)


def test_nanogpts_own_model_file_is_checked_at_the_checkpoints_shape(run_with_log, tmp_path):
    # GIVEN an imported run (its config carries the extra model_class key) and nanoGPT's model.py
    out_dir, data_dir, _, _ = run_with_log
    ws = tmp_path / "ws"
    import_nanogpt(out_dir, data_dir, ws)
    # WHEN the fresh-model checks run with --model nanogpt's GPT and no --config
    ctx = CheckContext(CheckOptions(workspace=ws, model_spec=f"{NANOGPT_MODEL}:GPT", device="cpu", skip_overfit=True))
    # THEN they use the checkpoint's 4 x 64, block 32, no bias: not the debug shape
    config = ctx.base_config()
    assert (config["n_layer"], config["n_embd"], config["block_size"], config["bias"]) == (4, 64, 32, False)
    assert ctx.config_source() == ("the checkpoint's config", False)
    result = run_checks(ctx, only=["forward_shapes"]).by_id()["forward_shapes"]
    assert result.values["batch_shape"][1] == 32 and "fresh-model config" not in result.summary


def test_a_checkpoint_config_the_class_cannot_take_is_named_as_a_fallback(run_with_log, tmp_path):
    out_dir, data_dir, _, _ = run_with_log
    ws = tmp_path / "ws"
    import_nanogpt(out_dir, data_dir, ws)
    spec = f"{Path(__file__).parent / 'fixtures' / 'tinygpt.py'}:TinyGPT"
    ctx = CheckContext(CheckOptions(workspace=ws, model_spec=spec, device="cpu", skip_overfit=True))
    source, fallback = ctx.config_source()
    assert fallback and source.startswith("the debug preset (the checkpoint's config has bias")
    result = run_checks(ctx, only=["forward_shapes"]).by_id()["forward_shapes"]
    assert "fresh-model config: the debug preset" in result.summary


def test_import_refuses_a_log_that_is_not_nanogpts_and_writes_nothing(run_with_log, tmp_path):
    out_dir, data_dir, _, _ = run_with_log
    bad = tmp_path / "bad.log"
    bad.write_text("hello\n")
    ws = tmp_path / "ws"
    with pytest.raises(DataError):
        import_nanogpt(out_dir, data_dir, ws, log=bad)
    assert not Workspace(ws).best_checkpoint.exists() and not Workspace(ws).metrics.exists()
