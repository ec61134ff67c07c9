"""A bare seven-tab Textual app: the yardstick `benchmarks/run.py` measures minigpt-tui against.

Seven TabPanes titled like the inspector's (so the same first-frame test reads both), each one
DataTable of 30 rows, keys 1-7 to switch tabs and q to quit; nothing else.

    python benchmarks/bare_app.py
"""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, TabbedContent, TabPane

TITLES = ["Checks", "Device", "Tokenizer", "Batches", "Gradients", "Loss", "Sampler"]
ROWS = 30


class BareApp(App[None]):
    BINDINGS = [Binding(str(n), f"show_tab('tab-{n}')", show=False) for n in range(1, 8)] + [
        Binding("q", "quit", "Quit")
    ]

    def compose(self) -> ComposeResult:
        with TabbedContent():
            for n, title in enumerate(TITLES, start=1):
                with TabPane(f"{n} {title}", id=f"tab-{n}"):
                    yield DataTable(id=f"table-{n}")

    def on_mount(self) -> None:
        for n, title in enumerate(TITLES, start=1):
            table = self.query_one(f"#table-{n}", DataTable)
            table.add_columns("row", title.lower(), "value", "note")
            table.add_rows((i, f"{title.lower()} {i}", f"{i * n * 0.137:.3f}", "x" * (i % 17)) for i in range(ROWS))

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab


if __name__ == "__main__":
    BareApp().run()
