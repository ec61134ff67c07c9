"""A one-line text field with a size limit that says what a paste lost.

Textual's `Input` keeps only the first line of a paste, silently, and with `max_length` refuses a
paste that would not fit as a whole (a bell). Every pane re-reads its field at each change (encodes
it, checks it against the tokenizer), so an unbounded field lets a 1 MB paste hold the UI for a
minute and every key after it for seconds. This field keeps what fits of the first line and tells
the user, in a notification, how much of the paste was left out and why.
"""

from __future__ import annotations

from textual import events
from textual.widgets import Input


def paste_notice(text: str, kept: int, limit: int, what: str) -> str | None:
    """What a paste of `text` lost when `kept` characters of its first line went in (None: nothing)."""
    lines = text.splitlines() or [""]
    first = lines[0]
    lost = []
    if kept < len(first):
        lost.append(f"kept {kept:,} of its {len(first):,} characters ({what} holds at most {limit:,})")
    if len(lines) > 1:
        lost.append(f"kept its first line of {len(lines):,} (the field holds one line)")
    return "pasted text: " + "; ".join(lost) if lost else None


class BoundedInput(Input):
    """An `Input` of at most `max_length` characters; a paste is cut to fit, with a notification."""

    def __init__(self, *args, max_length: int, what: str = "the field", **kwargs) -> None:
        super().__init__(*args, max_length=max_length, **kwargs)
        self._limit, self._what = max_length, what

    def _on_paste(self, event: events.Paste) -> None:
        event.stop()
        if not event.text:
            return
        first = event.text.splitlines()[0] if event.text.splitlines() else ""
        start, end = sorted(self.selection)
        room = max(0, self._limit - (len(self.value) - (end - start)))
        kept = first[:room]
        if kept:
            self.replace(kept, start, end)
        notice = paste_notice(event.text, len(kept), self._limit, self._what)
        if notice:
            self.notify(notice, severity="warning", timeout=8)
