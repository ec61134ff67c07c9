"""A yes/no question in a modal box."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from minigpt_tui.screens.answer_once import AnswerOnceScreen


class ConfirmScreen(AnswerOnceScreen[bool]):
    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="modal-box"):
            yield Static(self.question, id="confirm-question", markup=False)
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self.yes} (y)", variant="primary", id="confirm-yes")
                yield Button(f"{self.no} (n)", id="confirm-no")

    @on(Button.Pressed)
    def answer_button(self, event: Button.Pressed) -> None:
        self.answer(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.answer(yes)
