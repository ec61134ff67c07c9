"""Building the demo workspace: a progress bar and the current stage."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ProgressBar, Static


class DemoSetupScreen(ModalScreen[None]):
    def __init__(self, workspace: str) -> None:
        super().__init__()
        self.workspace = workspace

    def compose(self) -> ComposeResult:
        with Vertical(id="setup-box", classes="modal-box"):
            yield Static("Building the demo workspace (embedded corpus, debug preset)", id="setup-title")
            yield Static(self.workspace, id="setup-path", markup=False)
            yield ProgressBar(total=100, show_eta=False, id="setup-progress")
            yield Label("starting…", id="setup-stage", markup=False)

    def show_progress(self, stage: str, fraction: float) -> None:
        self.query_one(ProgressBar).update(progress=round(100 * fraction))
        self.query_one("#setup-stage", Label).update(stage)
