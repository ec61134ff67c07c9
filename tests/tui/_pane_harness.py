"""A minimal App for testing one pane alone: the attributes the real App gives panes
(`session`, `workspace`, `device_name`) and nothing else."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widget import Widget

from minigpt.io.workspace import Workspace


class PaneHarness(App):
    def __init__(self, make_pane: Callable[[], Widget], workspace: Workspace | None, session=None):
        super().__init__()
        self.make_pane = make_pane
        self.workspace = workspace
        self.session = session
        self.metrics_path = None  # the app's --metrics
        self.device_name = "cpu (test)"
        self.pane: Widget | None = None

    def compose(self) -> ComposeResult:
        self.pane = self.make_pane()
        yield self.pane


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    """A prepared demo workspace (tokenizer + IDs, no checkpoint), built once per session (~0.2 s)."""
    from minigpt.data.prepare import prepare_workspace

    root = tmp_path_factory.mktemp("tui_demo") / "ws"
    prepare_workspace("demo", root)
    return root


@pytest.fixture
def demo_ws(tmp_path, demo_template) -> Workspace:
    """A fresh copy of the demo workspace per test."""
    shutil.copytree(demo_template, tmp_path / "ws")
    return Workspace(tmp_path / "ws")


async def until(pilot, condition, timeout: float = 20.0) -> bool:
    """Pause the app until `condition()` holds or `timeout` passes; returns the final condition."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause()
        if condition():
            return True
        await asyncio.sleep(0.05)
    return condition()
