"""`f`: pick a known bug to inject (or clear the current one); the app then re-runs the checks."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from minigpt_tui.screens.answer_once import AnswerOnceScreen

CLEAR = "__clear__"


class FaultMenuScreen(AnswerOnceScreen[str | None]):
    """Dismisses with a fault name, CLEAR, or None (cancelled)."""

    BINDINGS = [Binding("escape,q", "cancel", "Cancel")]

    def __init__(self, faults: list[tuple[str, str, str]], current: str | None) -> None:
        super().__init__()
        self.faults = faults  # (name, description, intended check)
        self.current = current

    def compose(self) -> ComposeResult:
        options = []
        for name, description, intended in self.faults:
            prompt = Text.assemble(
                ("● " if name == self.current else "  "),
                (name, "bold"),
                "  trips ",
                (intended, "cyan"),
                "\n    ",
                Text(description, style="dim"),
            )
            options.append(Option(prompt, id=name))
        clear = Text.assemble(
            ("● " if self.current is None else "  "), ("clear fault", "bold"), "  run the pipeline as it is"
        )
        options.append(Option(clear, id=CLEAR))
        with Vertical(id="fault-box", classes="modal-box"):
            yield Static(
                Text.assemble(("Inject a fault", "bold"), "  (enter: inject and re-run the checks, escape: cancel)"),
                id="fault-title",
            )
            yield OptionList(*options, id="fault-list")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    @on(OptionList.OptionSelected)
    def choose(self, event: OptionList.OptionSelected) -> None:
        self.answer(event.option.id)

    def action_cancel(self) -> None:
        self.answer(None)
