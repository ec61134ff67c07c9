"""Building the demo workspace: a progress bar and the current stage; q, Ctrl+C or Escape cancel."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, ProgressBar, Static

from minigpt_tui.host import host

REBUILD_REASON = "rebuilding: the last build was left incomplete (cancelled or killed half-way)"


class DemoSetupScreen(ModalScreen[None]):
    BINDINGS = [Binding("q,ctrl+c,escape", "cancel_build", "Cancel and quit", priority=True)]

    def __init__(self, workspace: str, rebuilding: bool = False) -> None:
        super().__init__()
        self.workspace = workspace
        self.rebuilding = rebuilding
        self.cancelling = False

    def compose(self) -> ComposeResult:
        with Vertical(id="setup-box", classes="modal-box"):
            yield Static("Building the demo workspace (embedded corpus, debug preset)", id="setup-title")
            yield Static(self.workspace, id="setup-path", markup=False)
            if self.rebuilding:  # stays on screen for the whole build; a notice would time out first
                yield Static(REBUILD_REASON, id="setup-reason", markup=False)
            yield ProgressBar(total=100, show_eta=False, id="setup-progress")
            yield Label("starting…", id="setup-stage", markup=False)
            yield Static("q, Ctrl+C or Escape: cancel and quit", id="setup-hint")

    def show_progress(self, stage: str, fraction: float) -> None:
        if self.cancelling:
            return
        self.query_one(ProgressBar).update(progress=round(100 * fraction))
        self.query_one("#setup-stage", Label).update(stage)

    def action_cancel_build(self) -> None:
        if self.cancelling:
            return
        self.cancelling = True
        self.query_one("#setup-stage", Label).update("cancelling: stopping at the next training step…")
        host(self).cancel_demo()
