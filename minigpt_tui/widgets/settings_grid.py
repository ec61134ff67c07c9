"""A grid of short text cells edited in place, drawn as one widget: a row per setting, a column
per set of values (the sampler's A and B), a label column on the left and a header row on top.

One widget rather than an Input per cell: Textual lays out and draws every widget of a pane each
time the pane is shown, and a form of a dozen Inputs with their labels is twenty widgets.

Keys, with the grid focused: the arrows move between cells; a typed character replaces the cell's
text when the cursor has just arrived there (the cell is highlighted whole, as in a spreadsheet)
and is appended after that (a caret shows at the end); backspace deletes the last character,
delete empties the cell, enter submits. Pasted text is typed. A click selects a cell. A fixed
cell (shown, not editable) is stepped over."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import events
from textual.geometry import Size
from textual.message import Message
from textual.widget import Widget

from minigpt_tui.widgets.bounded_input import paste_notice

CELL_MAX_CHARS = 64  # a cell holds a number or a word; a paste longer than this is cut, with a notice

Cell = tuple[str, str]  # (column, row)


@dataclass
class CellMessage(Message):
    """A message about one cell of a grid."""

    grid: SettingsGrid
    column: str
    row: str

    @property
    def control(self) -> SettingsGrid:
        return self.grid


class SettingsGrid(Widget, can_focus=True):
    """Rows x columns of text cells, edited in place; posts `Changed` on every edit and `Submitted`
    on enter. Cells are named `(column, row)` by the keys given."""

    ALLOW_SELECT = False  # a click picks a cell; it does not start a text selection
    # handled as the key arrives, not as bindings: a binding runs once the key has bubbled up to the
    # app, after the keys queued behind it, so in a fast burst "down 3" the 3 would land in the cell above
    MOVES = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}
    COMPONENT_CLASSES = {
        "settings-grid--header",
        "settings-grid--cursor",
        "settings-grid--caret",
        "settings-grid--fixed",
        "settings-grid--hint",
        "settings-grid--invalid",
    }
    DEFAULT_CSS = """
    SettingsGrid { height: auto; width: 1fr; }
    SettingsGrid > .settings-grid--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    SettingsGrid > .settings-grid--caret { text-style: reverse; }
    SettingsGrid > .settings-grid--fixed { color: $text-muted; }
    SettingsGrid > .settings-grid--hint { color: $text-muted; }
    SettingsGrid > .settings-grid--invalid { color: $text-error; text-style: bold; }
    """

    @dataclass
    class Changed(CellMessage):
        """A cell's text changed (typed, or set by `set_text`)."""

        text: str

    @dataclass
    class Submitted(CellMessage):
        """Enter was pressed on a cell."""

    def __init__(
        self,
        rows: Sequence[tuple[str, str]],
        columns: Sequence[str],
        texts: Mapping[Cell, str],
        fixed: Mapping[Cell, str] | None = None,
        *,
        corner: str = "",
        hint: str = "←↑↓→ move · type to edit",
        label_width: int = 14,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        """`rows`: (key, label) from top to bottom; `columns`: the column keys, also their headers;
        `texts`: every editable cell's starting text; `fixed`: cells shown with this text and
        never edited; `corner`: the label column's header; `hint`: shown after the headers while
        the grid has the focus."""
        super().__init__(name=name, id=id, classes=classes)
        self.rows = list(rows)
        self.columns = list(columns)
        self.fixed = dict(fixed or {})
        self.corner = corner
        self.hint = hint
        self.label_width = label_width
        self._texts = {(c, r): "" for c in self.columns for r, _ in self.rows if (c, r) not in self.fixed}
        self._texts.update({cell: text for cell, text in texts.items() if cell in self._texts})
        self._invalid: set[Cell] = set()
        self._cursor: Cell = min(self._texts, key=self._position)  # the first editable cell, row by row
        self._fresh = True  # the cursor just arrived: typing replaces the cell's text

    # -- reading and writing cells ------------------------------------------------------------
    def text(self, column: str, row: str) -> str:
        return self._texts[(column, row)]

    def set_text(self, column: str, row: str, text: str) -> None:
        """Set a cell's text as if typed (posts `Changed`)."""
        if (column, row) not in self._texts:
            raise KeyError(f"no editable cell {column}/{row}")
        self._texts[(column, row)] = text
        self.post_message(self.Changed(self, column, row, text))
        self.refresh()

    def mark_invalid(self, cells: Iterable[Cell]) -> None:
        """Draw these cells as invalid (the others as valid)."""
        invalid = set(cells)
        if invalid != self._invalid:
            self._invalid = invalid
            self.refresh()

    def is_invalid(self, column: str, row: str) -> bool:
        return (column, row) in self._invalid

    @property
    def cursor(self) -> Cell:
        return self._cursor

    def move_to(self, column: str, row: str) -> None:
        if (column, row) not in self._texts:
            raise KeyError(f"no editable cell {column}/{row}")
        self._cursor, self._fresh = (column, row), True
        self.refresh()

    # -- keys and mouse -----------------------------------------------------------------------
    def _position(self, cell: Cell) -> tuple[int, int]:
        column, row = cell
        return [r for r, _ in self.rows].index(row), self.columns.index(column)

    def action_move(self, down: int, right: int) -> None:
        """To the next editable cell in that direction, stepping over fixed ones; nowhere at an edge."""
        y, x = self._position(self._cursor)
        while True:
            y, x = y + down, x + right
            if not (0 <= y < len(self.rows) and 0 <= x < len(self.columns)):
                return
            cell = (self.columns[x], self.rows[y][0])
            if cell in self._texts:
                self.move_to(*cell)
                return

    def action_submit(self) -> None:
        self.post_message(self.Submitted(self, *self._cursor))

    def on_key(self, event: events.Key) -> None:
        old = self._texts[self._cursor]
        if event.key in self.MOVES:
            self.action_move(*self.MOVES[event.key])
        elif event.key == "enter":
            self.action_submit()
        elif event.key == "backspace":
            self._edit(old[:-1])
        elif event.key == "delete":
            self._edit("")
        elif event.is_printable and event.character:
            self._type(event.character)
        else:
            return  # tab, escape, the page keys: the focus chain, the app's and the pane's bindings
        event.stop()
        event.prevent_default()  # the grid's key: no pane or app binding fires

    def on_paste(self, event: events.Paste) -> None:
        """Pasted text is typed into the cell: what fits of its first line (a cell holds one), and
        a notification of what was left out."""
        event.stop()
        lines = event.text.splitlines()
        room = CELL_MAX_CHARS - (0 if self._fresh else len(self._texts[self._cursor]))
        kept = lines[0][: max(0, room)] if lines else ""
        if kept:
            self._type(kept)
        notice = paste_notice(event.text, len(kept), CELL_MAX_CHARS, "a setting")
        if notice:
            self.notify(notice, severity="warning", timeout=8)

    def _type(self, text: str) -> None:
        self._edit(text if self._fresh else self._texts[self._cursor] + text)

    def _edit(self, new: str) -> None:
        self._fresh = False
        if new != self._texts[self._cursor]:
            self.set_text(*self._cursor, new)
        else:
            self.refresh()  # the caret replaces the highlight

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1 or offset.y > len(self.rows) or offset.x < self.label_width:
            return
        x = (offset.x - self.label_width) // self._cell_width(self.content_size.width)
        if x < len(self.columns):
            cell = (self.columns[x], self.rows[offset.y - 1][0])
            if cell in self._texts:
                self.move_to(*cell)

    def on_focus(self) -> None:
        self._fresh = True
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    # -- drawing ------------------------------------------------------------------------------
    def _cell_width(self, width: int) -> int:
        return max(2, (width - self.label_width) // max(1, len(self.columns)))

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self.rows) + 1

    def render(self) -> Text:
        width = self._cell_width(self.content_size.width)
        style = self.get_component_rich_style
        lines = [_fit(self.corner, self.label_width, style("settings-grid--header"))]
        for column in self.columns:
            lines[0].append_text(_fit(column, width, style("settings-grid--header")))
        if self.has_focus and self.hint:  # the keys, where the eye is: the footer holds the app's
            lines[0].rstrip()
            lines[0].append(f"  {self.hint}", style("settings-grid--hint"))
            lines[0].truncate(self.label_width + width * len(self.columns), overflow="ellipsis", pad=True)
        for row, label in self.rows:
            line = _fit(label, self.label_width, Style())
            for column in self.columns:
                line.append_text(self._draw_cell((column, row), width))
            lines.append(line)
        grid = Text("\n").join(lines)
        grid.no_wrap, grid.overflow = True, "crop"  # a terminal narrower than the grid cuts its right side
        return grid

    def _draw_cell(self, cell: Cell, width: int) -> Text:
        style = self.get_component_rich_style
        if cell in self.fixed:
            return _fit(self.fixed[cell], width, style("settings-grid--fixed"))
        text = self._texts[cell]
        look = style("settings-grid--invalid") if cell in self._invalid else Style()
        if not (self.has_focus and cell == self._cursor):
            return _fit(text, width, look)
        cursor = style("settings-grid--cursor") + look
        if self._fresh:  # highlighted whole: typing replaces it
            return _fit(text, width - 1, cursor) + Text(" ")
        # editing: the text's end stays in view, then a caret, then the space before the next column
        room = max(1, width - 2)
        shown = text if cell_len(text) <= room else "…" + text[len(text) - room + 1 :]
        caret = Text(" ", style=look + style("settings-grid--caret"))
        return Text(shown, style=look) + caret + Text(" " * max(0, width - cell_len(shown) - 1))


def _fit(text: str, width: int, style: Style) -> Text:
    """`text` cut or padded to `width` cells, with one space before the next column."""
    shown = text if cell_len(text) < width else text[: max(0, width - 2)] + "…"
    return Text(shown, style=style) + Text(" " * max(0, width - cell_len(shown)))
