"""The next-token distribution after each sampler filter stage, as probability bars side by side."""

from __future__ import annotations

import io

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.status import visible_char

_EIGHTHS = " ▏▎▍▌▋▊▉█"
SHORT_NAMES = {"repetition penalty": "rep. pen."}


def prob_bar(p: float, width: int = 5) -> str:
    """A bar `width` cells wide at p = 1, in eighths of a cell."""
    eighths = max(0, min(width * 8, round(p * width * 8)))
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


class StageBars(LiveStatic):
    """One column per stage: its name, how many tokens survive it, and its most likely tokens.

    `stages` are plain values: [{"name": str, "survivors": int, "top": [(char, prob), ...]}]."""

    DEFAULT_CSS = "StageBars { height: auto; }"

    def __init__(self, **kwargs) -> None:
        super().__init__("next-token distribution: generate to see it", markup=False, **kwargs)
        self.stages: list[dict] = []
        self._table: Table | None = None

    def show(self, stages: list[dict], title: str = "") -> None:
        self.stages = stages
        table = Table(
            box=None, padding=(0, 1, 0, 0), show_edge=False, title=title or None, title_justify="left", expand=False
        )
        for stage in stages:
            name = SHORT_NAMES.get(stage["name"], stage["name"])
            table.add_column(Text(f"{name}\n{stage['survivors']} left", style="bold"), no_wrap=True)
        depth = max((len(s["top"]) for s in stages), default=0)
        for i in range(depth):
            cells = []
            for stage in stages:
                if i < len(stage["top"]) and stage["top"][i][1] > 0:
                    ch, p = stage["top"][i]
                    shown = f"{p:.2f}"[1:] if p < 0.995 else "1.0"  # ".26": five stages fit 80 columns
                    char = visible_char(ch)  # ␣ for a space, not the repr "' '"
                    cells.append(Text(f"{char}{' ' * max(1, 3 - cell_len(char))}{prob_bar(p, 3)} {shown}"))
                else:
                    cells.append(Text(""))
            table.add_row(*cells)
        self._table = table
        self.update(table)
        self.display = True

    def clear(self) -> None:
        """Nothing to show (takes no room until the next `show`)."""
        self.stages, self._table = [], None
        self.update("")
        self.display = False

    def plain(self, width: int = 100) -> str:
        """The table as plain text (for tests and logs)."""
        if self._table is None:
            return ""
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(self._table)
        return out.getvalue()
