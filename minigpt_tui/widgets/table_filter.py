"""A filter line for a table, as in k9s and lazygit: `/` opens it, typing filters, `enter` goes back
to the table keeping the filter, `escape` clears it and goes back."""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.message import Message
from textual.widgets import Input


def matches(query: str, *fields: str) -> bool:
    """Every space-separated word of `query` appears (case-insensitive) in one of `fields`."""
    haystack = " ".join(fields).lower()
    return all(word in haystack for word in query.lower().split())


class TableFilter(Input):
    """Hidden until `open()`; posts `TableFilter.FilterChanged` with the query (also when cleared)."""

    DEFAULT_CSS = """
    TableFilter { display: none; height: 1; border: none; padding: 0 1; }
    TableFilter.-open { display: block; }
    """
    BINDINGS = [
        Binding("escape", "clear_filter", "Clear filter"),
        Binding("enter", "keep_filter", "Keep filter", show=False),
    ]

    @dataclass
    class FilterChanged(Message):
        filter: TableFilter
        query: str

        @property
        def control(self) -> TableFilter:
            return self.filter

    def __init__(self, placeholder: str = "filter: type to narrow, enter keeps, escape clears", **kwargs) -> None:
        super().__init__(placeholder=placeholder, compact=True, **kwargs)
        self.return_to = None  # the widget focused before opening
        self.disabled = True  # closed: out of the focus chain, so a pane's first focus lands on its table

    @property
    def query_text(self) -> str:
        return self.value.strip() if self.has_class("-open") else ""

    def open(self, return_to=None) -> None:
        self.return_to = return_to
        self.disabled = False
        self.add_class("-open")
        self.focus()

    def _on_input_changed(self, event: Input.Changed) -> None:
        if event.input is self:
            self.post_message(self.FilterChanged(self, self.query_text))

    def action_keep_filter(self) -> None:
        if not self.value.strip():
            self.action_clear_filter()
            return
        self._back()

    def action_clear_filter(self) -> None:
        was_open = self.has_class("-open")
        self.remove_class("-open")
        self.value = ""
        if was_open:
            self.post_message(self.FilterChanged(self, ""))
        self._back()
        self.disabled = True

    def _back(self) -> None:
        if self.return_to is not None:
            self.return_to.focus()
