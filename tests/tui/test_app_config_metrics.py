"""minigpt-tui --config and --metrics reach the checks, and the Loss pane follows a --metrics JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from minigpt_tui.__main__ import build_parser
from minigpt_tui.panes.loss import LossPane

from .conftest import SIZE, wait_until


def test_the_flags_are_parsed():
    args = build_parser().parse_args(["--config", "c.json", "--metrics", "runs/", "--model", "hf:out"])
    assert (args.config_path, args.metrics, args.model_spec) == ("c.json", "runs/", "hf:out")


async def test_config_and_metrics_reach_the_check_options_and_the_loss_pane(workspace, make_app, tmp_path):
    log = tmp_path / "other.jsonl"
    log.write_text("".join(json.dumps({"step": s, "train_loss": 4 * math.exp(-s / 50)}) + "\n" for s in range(40)))
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": 103, "block_size": 16}))
    app = make_app(workspace, config_path=str(config), metrics=str(log))
    async with app.run_test(size=SIZE) as pilot:
        options = app.session.options
        assert Path(options.metrics) == log and Path(options.config_path) == config
        await wait_until(pilot, lambda: bool(app.query(LossPane)), 30, "the Loss pane to mount")
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 40, 30, "the Loss pane to read --metrics")
        assert pane.metrics_path == log


async def test_the_loss_pane_follows_a_tensorboard_run_given_as_metrics(workspace, make_app, tmp_path):
    # GIVEN a TensorBoard run (train and val loss) passed as --metrics, as the checks read it
    pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "tb"
    writer = SummaryWriter(str(run))
    for s in range(0, 40, 2):
        writer.add_scalar("train/loss", 4 * math.exp(-s / 50), s)
    writer.add_scalar("val/loss", 3.5, 38)
    writer.close()
    app = make_app(workspace, metrics=str(run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(app.query(LossPane)), 30, "the Loss pane to mount")
        pane = app.query_one(LossPane)
        # THEN the pane follows the events: every step, the last val loss, the run's folder
        await wait_until(pilot, lambda: pane.points_count == 20, 30, "the Loss pane to read the TensorBoard run")
        assert pane.metrics_path == run
        assert pane.snapshot.last["val_loss"] == 3.5 and pane.snapshot.last_step == 38
