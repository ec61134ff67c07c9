"""A minimal App for testing one pane alone: the attributes the real App gives panes
(`session`, `workspace`, `device_name`), and its training run as the real App runs it for its
panes (started and stopped when asked, its events handed to the pane)."""

from __future__ import annotations

import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import textual
import tomllib
from textual import on
from textual.app import App, ComposeResult
from textual.widget import Widget

from minigpt.io.workspace import Workspace
from minigpt_tui.messages import TrainingEnded, TrainingRequested, TrainingStarted, TrainingStopRequested
from minigpt_tui.training_session import TrainingSession

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def snapshot_textual_pin() -> str:
    """The Textual version the SVG snapshots are drawn with: the test extra's `textual==X` pin."""
    extra = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["test"]
    pins = [m.group(1) for r in extra if (m := re.fullmatch(r"textual==([\w.]+)", r.replace(" ", "")))]
    assert len(pins) == 1, f"pyproject.toml's test extra pins textual {len(pins)} times, expected once: {extra}"
    return pins[0]


def only_on_the_pinned_textual() -> pytest.MarkDecorator:
    """Snapshots break on every Textual upgrade: on any version but the pinned one they skip."""
    pin = snapshot_textual_pin()
    return pytest.mark.skipif(
        textual.__version__ != pin, reason=f"snapshots pinned to textual {pin} (found {textual.__version__})"
    )


class PaneHarness(App):
    def __init__(self, make_pane: Callable[[], Widget], workspace: Workspace | None, session=None):
        super().__init__()
        self.make_pane = make_pane
        self.workspace = workspace
        self.session = session
        self.metrics_path = None  # the app's --metrics
        self.device_name = "cpu (test)"
        self.pane: Widget | None = None
        self.training = TrainingSession(self)

    def compose(self) -> ComposeResult:
        self.pane = self.make_pane()
        yield self.pane

    @on(TrainingRequested)
    def _start_training(self, message: TrainingRequested) -> None:
        assert self.workspace is not None
        self.training.start(self.workspace.root, message.args)

    @on(TrainingStopRequested)
    def _stop_training(self) -> None:
        self.training.stop()

    @on(TrainingStarted)
    @on(TrainingEnded)
    def _tell_the_pane(self, message: TrainingStarted | TrainingEnded) -> None:
        if self.pane is not None:
            copy = dataclasses.replace(message)
            copy.bubble = False  # not back up to here
            self.pane.post_message(copy)

    def on_unmount(self) -> None:
        self.training.interrupt()


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
