"""Lines that fit the terminal: broken at spaces by the command itself, never by the terminal.

A terminal breaks a long line at its last column, wherever that falls: inside a number
(`108,736` as `1` / `08,736`) or a duration (`(0.` / `01s)`). `hanging` breaks a line at spaces
only, keeps a number with the word it measures (`batch_size 8`), and indents the continuation
lines under the text they continue. Output to a pipe or a file keeps one line per message (for
grep) unless COLUMNS names a width.
"""

from __future__ import annotations

import os
import re

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

MIN_BODY = 24  # columns a continuation gets at least: narrower, it starts near the left edge instead
_WORD = re.compile(r"\S+\s*")


def wrap_width(console: Console) -> int | None:
    """The width to fit: the terminal's, or COLUMNS where set; None for a pipe or a file."""
    if console.is_terminal or os.environ.get("COLUMNS", "").strip():
        return console.width
    return None


def _units(plain: str) -> list[tuple[int, int]]:
    """(start, end) of the pieces a line may break between: words, a number kept with the word
    before it unless that word ends a clause (`n_layer 2,` is one piece; `8; 108,736` two)."""
    units: list[tuple[int, int]] = []
    for m in _WORD.finditer(plain):
        word = m.group().rstrip()
        glued = units and word[0].isdigit() and plain[units[-1][0] : units[-1][1]].rstrip()[-1] not in ",;:"
        if glued:
            units[-1] = (units[-1][0], m.end())
        else:
            units.append((m.start(), m.end()))
    return units


def hanging(head: Text | str, body: Text | str, width: int | None, indent: int | None = None) -> Text:
    """`head` then `body`, broken at spaces to fit `width` columns, continuation lines indented by
    `indent` (default: the head's width). A piece too wide for an indented line (a long path) gets a
    line of its own from the left edge, whole: the terminal folds it only if it is wider than the
    terminal. With no width, one line."""
    head = Text(head) if isinstance(head, str) else head
    body = Text(body) if isinstance(body, str) else body
    if width is None:
        return Text.assemble(head, body)
    indent = head.cell_len if indent is None else indent
    if width - indent < MIN_BODY:
        indent = min(indent, 2)
    plain = body.plain
    lines = [(0, 0)]  # (columns before it, where in `body` it starts); the first follows the head
    used, room = 0, width - head.cell_len
    for lo, hi in _units(plain):
        size = cell_len(plain[lo:hi].rstrip())
        wide = size > width - indent
        pad = 0 if wide else indent
        # break before this piece if it does not fit; at the start of the head's line, only if it
        # would fit on the next
        if used + size > room and (used or size <= width - pad):
            lines.append((pad, lo))
            used, room = 0, 0 if wide else width - pad  # nothing joins a wide piece's line
        used += cell_len(plain[lo:hi])
    out = head.copy()
    ends = [start for _, start in lines[1:]] + [len(plain)]
    for n, ((pad, start), end) in enumerate(zip(lines, ends)):
        line = body[start:end]
        line.rstrip()
        if n:
            out.rstrip()
            out.append("\n" + " " * pad)
        out.append_text(line)
    return out
