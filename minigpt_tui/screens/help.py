"""`?`: the key bindings and what each pane shows."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("1-7", "switch pane: Checks, Device & files, Tokenizer, Batches, Gradients, Loss, Sampler"),
    ("r", "re-run all checks"),
    ("enter", "re-run the highlighted check (Checks pane)"),
    ("f", "inject a fault (or clear it) and re-run the checks"),
    ("ctrl+e", "export the report JSON to <workspace>/reports/"),
    ("↑ ↓ / j k, n", "Batches: move between rows, draw a new batch"),
    ("n g o", "Gradients: sort by name, gradient norm, update/weight ratio (again: reverse)"),
    ("s", "Gradients: switch between the training run's gradients and the gradients check's fresh model"),
    ("/", "Checks, Gradients: filter the table as you type (enter keeps it, escape clears it)"),
    ("s / x, t", "Loss: start / stop a training subprocess; t toggles it from any pane"),
    ("l m z p", "Loss: log scale, EMA smoothing (again: stronger), zoom to the last N steps, earlier runs"),
    ("enter", "Sampler: generate with settings A (buttons: Compare A/B, Stop)"),
    ("tab, escape", "Sampler, Tokenizer: into the text field; escape again: back to the tab bar"),
    ("ctrl+p", "command palette: every action, one command per check and fault"),
    ("?", "this help"),
    ("q, ctrl+c", "quit (asks first while a training run started here is going)"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss_help", "Close")]

    def compose(self) -> ComposeResult:
        table = Table(title="minigpt-tui keys", show_header=False, box=None, padding=(0, 2), title_style="bold")
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in KEYS:
            table.add_row(key, Text(what))
        with VerticalScroll(id="help-box", classes="modal-box"):
            yield Static(table, id="help-keys")
            yield Static(
                Text(
                    "Keys typed into a text field go into the field (in the Sampler, also with a button\n"
                    "focused); escape leaves the field, and the keys above work again.\n"
                    "↑ ↓ page up/down scroll this help; escape, ? or q close it.",
                    style="dim",
                )
            )

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()  # the arrow keys scroll at once, no Tab first

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
