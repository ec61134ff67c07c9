"""The next-token distribution after each sampler filter stage, as probability bars side by side."""

from __future__ import annotations

import io
from collections.abc import Iterator

from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from minigpt_tui.widgets.live_static import LiveStatic

_EIGHTHS = " ▏▎▍▌▋▊▉█"
SHORT_NAMES = {"repetition penalty": "rep. pen."}
BAR_CELLS = 3
CELL_REST = 1 + BAR_CELLS + 1 + 3  # what a cell holds besides its piece: a space, the bar, a space, ".26"
PIECE_MIN = 2  # a character and a space: a character tokenizer's table as narrow as before
PIECE_MAX = 16  # <|endoftext|> whole, where the width allows


def prob_bar(p: float, width: int = 5) -> str:
    """A bar `width` cells wide at p = 1, in eighths of a cell."""
    eighths = max(0, min(width * 8, round(p * width * 8)))
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


def piece_cells(width: int, headers: list[int], widest: int = PIECE_MAX) -> int:
    """The piece column's width in every stage: the tokenizer's widest label (`widest`), within
    what `width` cells leave for the stages' columns (each at least as wide as its header, one
    cell between them), so each probability stays on screen."""
    cells = max(PIECE_MIN, min(widest, PIECE_MAX))
    while cells > PIECE_MIN and sum(max(cells + CELL_REST, h) for h in headers) + len(headers) - 1 > width:
        cells -= 1
    return cells


def fit_piece(label: str, cells: int) -> str:
    """`label` in exactly `cells` cells: padded, or cut with … so the cut shows (<|endof…)."""
    if cell_len(label) <= cells:
        return set_cell_size(label, cells)
    return set_cell_size(label, cells - 1) + "…"


def stage_cell(label: str, p: float, cells: int) -> str:
    """One token of a stage: its piece in `cells` cells, its bar and its probability (".26")."""
    shown = f"{p:.2f}"[1:] if p < 0.995 else "1.0"  # ".26": five stages fit 80 columns
    return f"{fit_piece(label, cells)} {prob_bar(p, BAR_CELLS)} {shown}"


class StageTable:
    """The stages as a table laid out for the width it is drawn at: the piece column as wide as
    the tokenizer's widest label allows there, the same in every row and stage."""

    def __init__(self, stages: list[dict], title: str = "", widest: int = PIECE_MAX) -> None:
        self.stages, self.title, self.widest = stages, title, widest

    def table(self, width: int) -> Table:
        headers = [(SHORT_NAMES.get(s["name"], s["name"]), f"{s['survivors']} left") for s in self.stages]
        cells = piece_cells(width, [max(map(cell_len, h)) for h in headers], self.widest)
        table = Table(
            box=None,
            padding=(0, 1, 0, 0),
            pad_edge=False,
            show_edge=False,
            title=self.title or None,
            title_justify="left",
            expand=False,
        )
        for name, left in headers:
            table.add_column(Text(f"{name}\n{left}", style="bold"), no_wrap=True)
        depth = max((len(s["top"]) for s in self.stages), default=0)
        for i in range(depth):
            row = []
            for stage in self.stages:
                top = stage["top"]
                if i < len(top) and top[i][1] > 0:
                    label, p = top[i]
                    row.append(Text(stage_cell(label, p, cells)))
                else:
                    row.append(Text(""))
            table.add_row(*row)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Table]:
        yield self.table(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table(options.max_width))


class StageBars(LiveStatic):
    """One column per stage: its name, how many tokens survive it, and its most likely tokens.

    `stages` are plain values: [{"name": str, "survivors": int, "top": [(label, prob), ...]}], each
    label as `minigpt.data.tokenizer_api.piece_label` writes it."""

    DEFAULT_CSS = "StageBars { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__("next-token distribution: generate to see it", markup=False, **kwargs)
        self.stages: list[dict] = []
        self._table: StageTable | None = None

    def show(self, stages: list[dict], title: str = "", widest: int = PIECE_MAX) -> None:
        """`widest`: the most cells a label of this tokenizer takes (a character tokenizer's: 1 or 2)."""
        self.stages = stages
        self._table = StageTable(stages, title, widest)
        self.update(self._table)
        self.display = True

    def clear(self) -> None:
        """Nothing to show (takes no room until the next `show`)."""
        self.stages, self._table = [], None
        self.update("")
        self.display = False

    def plain(self, width: int = 100) -> str:
        """The table as plain text at `width` columns (for tests and logs)."""
        if self._table is None:
            return ""
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(self._table)
        return out.getvalue()
