"""A check status as text: mark and word together, so it never relies on colour alone."""

from __future__ import annotations

from rich.text import Text

from minigpt.checks.result import STATUS_STYLE  # one table for the CLI and the UI (torch-free)

PENDING_MARKS = {"pending": "·", "running": "…"}

# whitespace made visible, one cell each so columns stay aligned
VISIBLE = {" ": "␣", "\n": "⏎", "\t": "→", "\r": "␍"}


def status_text(status) -> Text:
    """`status` is a minigpt Status (has .value and .mark) or "pending"/"running"."""
    word = getattr(status, "value", status)
    mark = getattr(status, "mark", None) or PENDING_MARKS.get(word, "?")
    return Text(f"{mark} {word}", style=STATUS_STYLE.get(word, ""))


def visible_char(ch: str) -> str:
    if ch in VISIBLE:
        return VISIBLE[ch]
    if not ch.isprintable():
        return "¿"
    return ch
