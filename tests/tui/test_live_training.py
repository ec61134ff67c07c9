"""Quitting while the UI's training run is going: the app asks; stop it, leave it running (and the
next UI names it), or cancel. The run is `python -m minigpt train` from minigpt_tui.training."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from textual.widgets import Static

from minigpt_tui.screens.quit import QuitTrainingScreen
from minigpt_tui.training import TrainingRun, train_command
from tests.waiting import stays, wait_until

from .conftest import rendered

LONG_RUN = ["--preset", "debug", "--steps", "100000", "--eval-interval", "50", "--device", "cpu"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_training_command_runs_this_interpreter_on_the_installed_package():
    cmd = train_command("/w", ["--steps", "5"])
    assert cmd == [sys.executable, "-m", "minigpt", "train", "--workspace", "/w", "--steps", "5"]
    assert TrainingRun("/w", []).log_path.as_posix() == "/w/logs/tui_train.log"


async def _start_training(pilot, app):
    await pilot.press("6")
    pane = app.panes["loss"]
    pane.controls.train_args = LONG_RUN
    assert pane.controls.start_training()
    await wait_until(pilot, lambda: pane.controls.own_pid is not None and pane.points_count > 0)
    return pane


@pytest.mark.slow
async def test_quit_asks_and_cancel_keeps_the_app_and_the_run(demo_ws, make_app):
    app = make_app(demo_ws.root)
    async with app.run_test(size=(80, 24)) as pilot:
        await _start_training(pilot, app)
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitTrainingScreen))
        await pilot.press("c")
        await wait_until(pilot, lambda: not isinstance(app.screen, QuitTrainingScreen), what="the question to close")
        await stays(pilot, lambda: app.is_running and app.training.run.running, 0.5, what="the app and the run")
        # THEN stop: the run exits (SIGINT, as Ctrl+C would) and the app quits
        pid = app.training.run.pid
        await pilot.press("q")
        await wait_until(pilot, lambda: isinstance(app.screen, QuitTrainingScreen))
        await pilot.press("s")
        await wait_until(pilot, lambda: not app.is_running)
    assert not _alive(pid)


@pytest.mark.slow
async def test_leave_it_running_keeps_the_run_and_the_next_ui_names_it(demo_ws, make_app):
    app = make_app(demo_ws.root)
    pid = None
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            pane = await _start_training(pilot, app)
            pid = app.training.run.pid
            await pilot.press("q")
            await wait_until(pilot, lambda: isinstance(app.screen, QuitTrainingScreen))
            await pilot.press("l")
            await wait_until(pilot, lambda: not app.is_running)
        await stays(None, lambda: _alive(pid), 1.0, what="the run left in the background (it died with the UI)")
        # WHEN the UI opens the workspace again, THEN the loss pane names the run and follows it
        again = make_app(demo_ws.root)
        async with again.run_test(size=(80, 24)) as pilot:
            await pilot.press("6")
            pane = again.panes["loss"]
            status = pane.query_one("#loss-status", Static)
            await wait_until(pilot, lambda: f"training in progress (PID {pid})" in rendered(status))
            grown = pane.points_count
            await wait_until(pilot, lambda: pane.points_count > grown)
            await pilot.press("q")  # not our run: no question
            await wait_until(pilot, lambda: not again.is_running)
    finally:
        if pid is not None and _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_the_path_to_the_training_confirm_and_quit_dialogs_imports_no_torch():
    import subprocess

    code = (
        "import sys, minigpt_tui.app, minigpt_tui.panes.loss, minigpt_tui.training, minigpt_tui.screens.quit, "
        "minigpt_tui.screens.confirm, minigpt.io.lock, minigpt.checks; "
        "from minigpt.checks import FAULTS, catalog; catalog(); "
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
