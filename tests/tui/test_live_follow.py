"""The loss pane keeps following: runs started outside the UI (fresh, fresh again, resumed), a fresh
run started from the pane while the terminal is resized, a follower that raises or hangs, and a
workspace another process is training in."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from textual.widgets import Static

import minigpt_tui.panes.curve_follow as curve_follow
import minigpt_tui.panes.loss as loss_module
from minigpt.io.lock import acquire
from minigpt.logs.follow import MetricsFollower
from minigpt_tui.curve_store import CurveStore
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.widgets.loss_plot import LossPlot
from tests.waiting import stays, wait_until

from ._pane_harness import PaneHarness
from .conftest import record_notifications, rendered
from .test_loss_pane import _lines, _workspace_with_metrics


def _last_x(plot: LossPlot) -> float | None:
    xs = plot.plotted("train_loss")[0]
    return xs[-1] if xs else None


def _status(pane: LossPane) -> str:
    return rendered(pane.query_one("#loss-status", Static))


def _train(root, *args: str) -> subprocess.Popen:
    """`minigpt train` as another terminal would run it (not the UI's subprocess)."""
    cmd = [sys.executable, "-m", "minigpt", "train", "--workspace", str(root), "--preset", "debug"]
    cmd += ["--device", "cpu", "--eval-interval", "20", "--quiet", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
async def test_follows_fresh_fresh_and_resumed_runs_started_outside_the_ui(demo_ws, make_app):
    app = make_app(demo_ws.root)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6")
        pane = app.panes["loss"]
        plot = pane.query_one(LossPlot)
        statuses: list[str] = []
        # GIVEN three runs in the same workspace, one after the other: the second moves the first to
        # previous/ and starts the log again; the third resumes the second, cutting its log back first
        for args, final in ((["--steps", "40"], 40), (["--steps", "30"], 30), (["--resume", "--steps", "120"], 120)):
            proc = _train(demo_ws.root, *args)
            try:

                def finished(proc=proc) -> bool:
                    statuses.append(_status(pane))
                    return proc.poll() is not None

                await wait_until(pilot, finished)
            finally:
                if proc.poll() is None:
                    proc.kill()
            assert proc.returncode == 0, proc.stdout.read()
            # THEN the plot reaches the run's last step (the fresh 30-step run is not drawn over the 40-step one)
            await wait_until(pilot, lambda final=final: _last_x(plot) == final and pane.snapshot.last_step == final)
            assert not plot.stale and "NOT" not in _status(pane)
        assert min(plot.plotted("train_loss")[0]) <= 20  # the resumed run kept the steps before it
        assert any(f"training in progress (PID {proc.pid})" in s for s in statuses), statuses[-5:]
        assert pane.follower_restarts == 0


@pytest.mark.slow
async def test_a_fresh_run_started_from_the_pane_is_followed_through_resizes(workspace, make_app):
    app = make_app(workspace)
    notified = record_notifications(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("6")
        pane = app.panes["loss"]
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: _last_x(plot) == 60)  # the fixture's run
        pane.controls.train_args = ["--preset", "debug", "--steps", "80", "--eval-interval", "40", "--device", "cpu"]
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        # WHEN the terminal is resized again and again while the new run writes its log
        sizes = [(80, 24), (120, 40), (100, 30), (81, 25)]
        n = 0
        while pane.controls.last_exit is None and n < 600:
            await pilot.resize_terminal(*sizes[n % len(sizes)])
            await pilot.pause(0.2)  # the next resize a moment later, not a wait for anything
            n += 1
        await wait_until(pilot, lambda: pane.controls.last_exit is not None, what="the run to end")
        assert pane.controls.last_exit is not None and pane.controls.last_exit.returncode == 0, pane.controls.last_exit
        # THEN the plot reaches the new run's last step, and no follower died on the way
        await wait_until(pilot, lambda: _last_x(plot) == 80)
        assert pane.follower_restarts == 0 and pane.follower_error is None
        assert not any(severity == "error" for severity, _ in notified)
        assert n > 3  # it did resize while following


async def test_a_follower_that_raises_is_shown_and_restarted(tmp_path, monkeypatch):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    real_snapshot = CurveStore.snapshot
    calls = []

    def snapshot_failing_once(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("reader exploded")
        return real_snapshot(self, *args, **kwargs)

    monkeypatch.setattr(CurveStore, "snapshot", snapshot_failing_once)
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        # THEN the pane says the follower failed, with the error, and marks the plot as not updating
        await wait_until(pilot, lambda: pane.follower_error is not None)
        assert "NOT FOLLOWING" in _status(pane) and "reader exploded" in _status(pane)
        assert plot.stale
        # AND a new follower reads the log
        await wait_until(pilot, lambda: pane.points_count == 100 and _last_x(plot) == 100)
        assert not plot.stale and "NOT" not in _status(pane)


@pytest.mark.slow  # a few seconds: the full run (CI) only
async def test_a_follower_that_hangs_is_marked_stale_and_replaced(tmp_path, monkeypatch):
    monkeypatch.setattr(loss_module, "STALL_S", 0.5)
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    release = threading.Event()
    made = []

    class FirstOneHangs(MetricsFollower):
        def __init__(self, path):
            super().__init__(path)
            made.append(self)
            self.hangs = len(made) == 1

        def poll(self, max_bytes=None):
            if self.hangs:
                release.wait(30)  # a reader stuck on a dead network mount, say
            return super().poll(max_bytes)

    monkeypatch.setattr(curve_follow, "run_follower", FirstOneHangs)  # the pane's reader of a metrics log
    app = PaneHarness(LossPane, ws)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = app.query_one(LossPane)
            plot = pane.query_one(LossPlot)
            # the stale state lasts from one 1 Hz watchdog tick to the replacement's first read,
            # which can be shorter than a poll of this test: record what the pane showed instead
            shown: list[str] = []
            show_text = pane._show_text

            def recording(widget_id, text):
                shown.append(str(text))
                return show_text(widget_id, text)

            pane._show_text = recording
            await wait_until(pilot, lambda: any("NOT UPDATING" in t for t in shown))
            await wait_until(pilot, lambda: pane.points_count == 100 and not plot.stale)
            assert len(made) >= 2 and "NOT" not in _status(pane)
    finally:
        release.set()


async def test_followers_that_all_hang_are_not_piled_up(tmp_path, monkeypatch):
    # GIVEN a log whose every read hangs (a cancel cannot interrupt a read in progress)
    monkeypatch.setattr(loss_module, "STALL_S", 0.2)
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    release = threading.Event()
    made = []

    class AllHang(MetricsFollower):
        def __init__(self, path):
            super().__init__(path)
            made.append(self)

        def poll(self, max_bytes=None):
            release.wait(60)
            return super().poll(max_bytes)

    monkeypatch.setattr(curve_follow, "run_follower", AllHang)
    app = PaneHarness(LossPane, ws)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = app.query_one(LossPane)
            # WHEN the watchdog has had many chances to restart it (1 Hz, silent past 2 x STALL_S)
            await wait_until(pilot, lambda: pane.follower_restarts >= 1, what="one replacement")
            # THEN it stops at the first follower and one replacement: no third reader is added
            await stays(pilot, lambda: len(made) <= loss_module.STUCK_FOLLOWERS_MAX, 3.0, what="two readers at most")
    finally:
        release.set()


@pytest.mark.slow
async def test_a_run_holding_the_workspace_lock_is_named_and_s_does_not_start_another(tmp_path):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 21))
    app = PaneHarness(LossPane, ws)
    notified = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 20)
        with acquire(ws.root, "train"):  # as a `minigpt train` in another terminal holds it
            await wait_until(pilot, lambda: f"training in progress (PID {os.getpid()})" in _status(pane))
            pane.focus()
            await pilot.press("s")
            # THEN it says who trains, and (in the same handler, so by now) started no run of its own
            await wait_until(
                pilot,
                lambda: any("training in progress" in message for _, message in notified),
                what="a notification naming the run in progress",
            )
            assert app.training.run is None
        await wait_until(pilot, lambda: "training in progress" not in _status(pane))
