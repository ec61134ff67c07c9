"""Quitting while the UI's training run is going: stop it, leave it running, or stay."""

from __future__ import annotations

from typing import Literal

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from minigpt_tui.screens.answer_once import AnswerOnceScreen

QuitChoice = Literal["stop", "leave", "cancel"]


class QuitTrainingScreen(AnswerOnceScreen[str]):
    """Dismisses with "stop", "leave" or "cancel"."""

    BINDINGS = [
        Binding("s", "choose('stop')", "Stop it"),
        Binding("l", "choose('leave')", "Leave it"),
        Binding("c,escape,n", "choose('cancel')", "Cancel"),
    ]

    def __init__(self, pid: int | None, log: str) -> None:
        super().__init__()
        self.pid, self.log_path = pid, log

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box", classes="modal-box"):
            yield Static(
                f"A training run started here is going (PID {self.pid}).\n\n"
                "Stop it: it exits like after Ctrl+C (the last saved checkpoint stays).\n"
                f"Leave it: it keeps training; its log is followed next time ({self.log_path}).",
                id="quit-question",
                markup=False,
            )
            with Horizontal(id="confirm-buttons"):
                yield Button("Stop it (s)", variant="error", id="stop")
                yield Button("Leave it (l)", variant="primary", id="leave")
                yield Button("Cancel (c)", id="cancel")

    @on(Button.Pressed)
    def answer_button(self, event: Button.Pressed) -> None:
        self.answer(event.button.id)

    def action_choose(self, choice: str) -> None:
        self.answer(choice)
