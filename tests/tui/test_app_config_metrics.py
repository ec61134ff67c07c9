"""minigpt-tui --config and --metrics reach the checks, and the Loss pane follows a --metrics JSONL."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from minigpt_tui.__main__ import build_parser
from minigpt_tui.panes.loss import LossPane
from tests.waiting import wait_until

from .conftest import SIZE


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
        await wait_until(pilot, lambda: bool(app.query(LossPane)), what="the Loss pane to mount")
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 40, what="the Loss pane to read --metrics")
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
        await wait_until(pilot, lambda: bool(app.query(LossPane)), what="the Loss pane to mount")
        pane = app.query_one(LossPane)
        # THEN the pane follows the events: every step, the last val loss, the run's folder
        await wait_until(pilot, lambda: pane.points_count == 20, what="the Loss pane to read the TensorBoard run")
        assert pane.metrics_path == run
        assert pane.snapshot.last["val_loss"] == 3.5 and pane.snapshot.last_step == 38


async def test_the_loss_pane_says_which_tensorboard_tag_it_read_as_validation(workspace, make_app, tmp_path):
    # GIVEN PyTorch's TensorBoard recipe (Loss/train, Loss/test) and an unjudged auxiliary loss
    pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")
    from torch.utils.tensorboard import SummaryWriter

    from .conftest import rendered

    run = tmp_path / "tb"
    writer = SummaryWriter(str(run))
    for s in range(0, 40, 2):
        writer.add_scalar("Loss/train", 4 * math.exp(-s / 50), s)
        writer.add_scalar("Loss/test", 4.1 * math.exp(-s / 50), s)
        writer.add_scalar("aux_loss", 0.1, s)
    writer.close()
    app = make_app(workspace, metrics=str(run))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(app.query(LossPane)), what="the Loss pane to mount")
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 20, what="the Loss pane to read the TensorBoard run")
        # THEN the test split is plotted as validation, and the pane says what it read and left out
        assert pane.snapshot.last["val_loss"] is not None
        await pilot.press("6")  # the Loss pane: its text is drawn when it is shown

        def text() -> str:
            return " ".join(rendered(pane.query_one("#loss-diagnosis")).split())

        await wait_until(pilot, lambda: "Loss/test" in text(), what="the pane to say what it read")
        assert "read Loss/test as the validation loss" in text() and "aux_loss" in text()


@pytest.mark.slow
async def test_the_loss_panes_advice_uses_the_clipping_and_warmup_the_watch_measured(make_app, tmp_path):
    # GIVEN nanoGPT's loop (clip 1.0, warmup 5) at LR 1.0, watched: the loss blows up although it clips
    from tests.fixtures import loops

    run = tmp_path / "run"
    loops.nanogpt_loop(run, max_iters=100, learning_rate=1.0, interval=10)
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(app.query(LossPane)), what="the Loss pane to mount")
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.diagnosis is not None, what="the Loss pane's verdict")
        # THEN the pane's advice is the check's: no "clip gradients", the warmup named as measured
        d = pane.diagnosis
        assert d.shape == "unstable" and not any("clip gradients" in f for f in d.fixes), d.fixes
        assert "a warmup of 5 steps (the watch measured the LR)" in d.causes
