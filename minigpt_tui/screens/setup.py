"""Building the demo workspace: this screen runs the build on a worker thread and shows its
progress; q, Ctrl+C or Escape cancel it (the build stops at its next step, nothing is marked
ready). It dismisses with the build's seconds, the error that stopped it, or None when cancelled."""

from __future__ import annotations

import threading
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Label, ProgressBar, Static
from textual.worker import Worker, WorkerState

from minigpt_tui import demo
from minigpt_tui.messages import DemoProgressed
from minigpt_tui.screens.answer_once import AnswerOnceScreen

REBUILD_REASON = "rebuilding: the last build was left incomplete (cancelled or killed half-way)"
STUCK_S = 10.0  # a cancelled build that has not stopped by then is not waited for (a step never takes this long)

DemoOutcome = float | BaseException | None  # seconds the build took, what stopped it, or cancelled


class DemoSetupScreen(AnswerOnceScreen[DemoOutcome]):
    BINDINGS = [Binding("q,ctrl+c,escape", "cancel_build", "Cancel and quit", priority=True)]

    def __init__(self, root: Path, cancel: threading.Event, *, steps: int = demo.DEMO_STEPS) -> None:
        super().__init__()
        self.root, self.cancel, self.steps = root, cancel, steps
        self.rebuilding = demo.is_incomplete(root)
        self.cancelling = False

    def compose(self) -> ComposeResult:
        with Vertical(id="setup-box", classes="modal-box"):
            yield Static("Building the demo workspace (embedded corpus, debug preset)", id="setup-title")
            yield Static(str(self.root), id="setup-path", markup=False)
            if self.rebuilding:  # stays on screen for the whole build; a notice would time out first
                yield Static(REBUILD_REASON, id="setup-reason", markup=False)
            yield ProgressBar(total=100, show_eta=False, id="setup-progress")
            yield Label("starting…", id="setup-stage", markup=False)
            yield Static("q, Ctrl+C or Escape: cancel and quit", id="setup-hint")

    def on_mount(self) -> None:
        self._build()

    @work(thread=True, exclusive=True, exit_on_error=False, group="demo", name="build demo")
    def _build(self) -> float | None:
        def progress(stage: str, fraction: float) -> None:
            self.post_message(DemoProgressed(stage, fraction))

        result = demo.build_demo(self.root, progress, self.cancel.is_set, steps=self.steps)
        return None if result["cancelled"] else result["seconds"]

    @on(DemoProgressed)
    def show_progress(self, message: DemoProgressed) -> None:
        if self.cancelling:
            return
        self.query_one(ProgressBar).update(progress=round(100 * message.fraction))
        self.query_one("#setup-stage", Label).update(message.stage)

    @on(Worker.StateChanged)
    def _finished(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "demo" or not event.worker.is_finished:
            return
        if event.state == WorkerState.ERROR:
            self.answer(event.worker.error)
        elif event.state == WorkerState.SUCCESS and not self.cancel.is_set():
            self.answer(event.worker.result)
        else:
            self.answer(None)

    def action_cancel_build(self) -> None:
        if self.cancelling:
            return
        self.cancelling = True
        self.cancel.set()
        self.query_one("#setup-stage", Label).update("cancelling: stopping at the next training step…")
        self.set_timer(STUCK_S, self.app.exit)
