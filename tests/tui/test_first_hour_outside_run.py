"""The inspector open while `minigpt train` runs in another terminal: the header follows the
checkpoints that run writes, and the Loss pane does not offer to start a run it would refuse."""

from __future__ import annotations

import os
import shutil

from textual.widgets import Static

from minigpt.io.lock import acquire
from minigpt.io.workspace import Workspace
from minigpt_tui import disk_watch
from minigpt_tui.panes.loss import LossPane
from tests.waiting import wait_until

from .conftest import SIZE, rendered, wait_for_report


async def test_a_checkpoint_written_after_the_checks_reaches_the_header(workspace, make_app, monkeypatch):
    # GIVEN a workspace whose checkpoints are not written yet (a run starting in another terminal)
    ws = Workspace(workspace)
    kept = workspace.parent / "kept"
    shutil.move(ws.checkpoints, kept)
    monkeypatch.setattr(disk_watch, "JUDGED_POLL_S", 0.2)
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await wait_until(pilot, lambda: "no checkpoint" in app.sub_title, what="'no checkpoint' in the header")
        # WHEN that run writes its first checkpoint
        shutil.move(kept, ws.checkpoints)
        # THEN the header says a checkpoint was written since, and how to judge it, without `r`
        await wait_until(pilot, lambda: "ckpt written since" in app.sub_title, what="the header to follow")


async def test_s_is_not_offered_while_another_process_trains_the_workspace(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("6")
        pane = app.query_one(LossPane)
        line = pane.query_one("#train-status", Static)
        await wait_until(pilot, lambda: "s start" in rendered(line), what="s offered on an idle workspace")
        # WHEN `minigpt train` in another terminal holds the workspace
        with acquire(workspace, "train"):
            # THEN the training line names that process and does not offer s (it would be refused)
            await wait_until(
                pilot,
                lambda: f"in another process, `minigpt train` (PID {os.getpid()}" in rendered(line),
                what="the other run",
            )
            assert "s start" not in rendered(line)
        # AND offers s again once that run let the workspace go
        await wait_until(pilot, lambda: "s start" in rendered(line), what="s offered again")
