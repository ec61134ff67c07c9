"""A check status as text (mark and word together, so it never relies on colour alone), and
characters and generated text with their whitespace made visible."""

from __future__ import annotations

from rich.text import Text

from minigpt.checks.result import STATUS_STYLE  # one table for the CLI and the UI (torch-free)
from minigpt.data.tokenizer_api import WHITESPACE_MARKS  # one table for the CLI, the checks and the UI

PENDING_MARKS = {"pending": "·", "running": "…"}

VISIBLE = WHITESPACE_MARKS  # whitespace made visible, one cell each so columns stay aligned


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


def visible_output(text: str) -> Text:
    """Generated text as it reads, with whitespace that would look like nothing made visible:
    runs of two or more spaces as ␣, tabs as →, empty lines as ⏎ (200 greedy spaces are not blank)."""
    out = Text()
    i = 0
    while i < len(text):
        ch = text[i]
        j = i
        while j < len(text) and text[j] == ch:
            j += 1
        run = j - i
        if ch == " " and (run > 1 or j == len(text)):
            out.append(VISIBLE[" "] * run, style="dim")
        elif ch == "\t":
            out.append(VISIBLE["\t"] * run, style="dim")
        elif ch == "\n":
            out.append((VISIBLE["\n"] + "\n") * (run - 1) + "\n" if run > 1 else "\n", style="dim")
        elif ch in ("\r",) or not ch.isprintable() and ch not in (" ",):
            out.append("¿" * run, style="dim")
        else:
            out.append(ch * run)
        i = j
    return out
