"""Pilot fixtures: one small real workspace per session, an app factory, and waiting helpers."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from minigpt.data.prepare import prepare_workspace
from minigpt.io.workspace import Workspace
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer
from minigpt_tui.app import MiniGPTApp
from tests.waiting import DEADLINE, wait_until

from ._pane_harness import demo_template, demo_ws  # noqa: F401  (fixtures for the pane tests)

SIZE = (120, 40)


@pytest.fixture(scope="session")
def _tui_workspace_template(tmp_path_factory) -> Path:
    """The demo corpus, prepared and trained for 60 debug steps (a few seconds on CPU)."""
    root = tmp_path_factory.mktemp("tui_workspace")
    prepare_workspace("demo", root)
    Trainer(Workspace(root), TrainConfig.from_preset("debug", max_steps=60, eval_interval=30, device="cpu")).run()
    return root


@pytest.fixture
def workspace(tmp_path, _tui_workspace_template) -> Path:
    """A fresh copy per test: tests export reports into it and may break files."""
    root = tmp_path / "ws"
    shutil.copytree(_tui_workspace_template, root)
    return root


@pytest.fixture
def make_app():
    def factory(workspace: Path, **kw) -> MiniGPTApp:
        kw.setdefault("skip_overfit", True)  # the 300-step overfit check alone takes ~25 s on 2 cores
        kw.setdefault("device", "cpu")
        return MiniGPTApp(workspace, **kw)

    return factory


async def wait_for_report(pilot, app: MiniGPTApp, previous=None, timeout: float = DEADLINE):
    """Wait until a check run newer than `previous` has finished and reached the panes."""
    await wait_until(
        pilot,
        lambda: app.session.last_report is not None and app.session.last_report is not previous,
        timeout,
        "the checks to finish",
    )
    await pilot.pause(0.1)
    return app.session.last_report


def rendered(widget) -> str:
    """The plain text a Static currently shows (its Rich renderable printed without styles)."""
    console = Console(width=SIZE[0], record=True, file=io.StringIO(), color_system=None)
    console.print(widget.content)
    return console.export_text()


def record_notifications(app) -> list[tuple[str, str]]:
    """(severity, message) of every notification the app makes from now on. A toast leaves the
    screen (and `app._notifications`) after a few seconds, which a loaded machine can spend before
    a test looks: tests read this record instead."""
    made: list[tuple[str, str]] = []
    notify = app.notify

    def recording(message, *args, **kwargs):
        made.append((str(kwargs.get("severity", "information")), str(message)))
        return notify(message, *args, **kwargs)

    app.notify = recording
    return made
