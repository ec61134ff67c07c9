"""The run's samples by step (`logs/samples.jsonl`) beside the loss curve: step 0's noise, then
the data's characters, then its words. Shown on demand; while shown it reads the file on a thread
every `POLL_S` seconds, only when it changed, and keeps the newest sample in view."""

from __future__ import annotations

import math
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from minigpt.logs.samples import SampleRecord
from minigpt_tui.widgets.live_static import LiveStatic

SHOWN = 40  # the newest samples shown (a long run writes one per evaluation)


def samples_text(samples: list[SampleRecord], path: str) -> Text:
    if not samples:
        return Text(
            f"no samples yet in {path}: minigpt train writes one at step 0 and after each evaluation; "
            "a watched loop does with minigpt.watch(..., tokenizer=PATH)"
        )
    out = Text()
    hidden = len(samples) - SHOWN
    if hidden > 0:
        out.append(f"({hidden} earlier samples not shown)\n", style="dim")
    for s in samples[-SHOWN:]:
        val = f"  val {s.val_loss:.3f}" if s.val_loss is not None and math.isfinite(s.val_loss) else ""
        out.append(f"step {s.step}{val}\n", style="bold")
        out.append(s.prompt, style="dim")
        out.append(s.text.replace("\n", "⏎") + "\n")
    return out


class SamplesView(VerticalScroll):
    """Hidden until `toggle(path)`; the `shown` class displays it (the pane's CSS lays it out)."""

    POLL_S = 2.0

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.path: Path | None = None
        self._seen: tuple | None = None  # (size, mtime) of the file last read

    def compose(self) -> ComposeResult:
        yield LiveStatic("", id=f"{self.id}-body" if self.id else None, markup=False)

    def on_mount(self) -> None:
        self.set_interval(self.POLL_S, self._poll)

    @property
    def shown(self) -> bool:
        return self.has_class("shown")

    def toggle(self, path: Path) -> bool:
        """Show (reading `path` now) or hide; True when it is shown."""
        self.set_class(not self.shown, "shown")
        if self.shown:
            self.path, self._seen = path, None
            # kept at the newest sample by each layout (new samples, a resize re-wrapping the text)
            # until the user scrolls up; scrolling back to the end anchors it again (Textual's anchor)
            self.anchor()
            self._poll()
        return self.shown

    def _poll(self) -> None:
        if self.shown and self.path is not None:
            self._read(self.path)

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-samples", name="samples reader")
    def _read(self, path: Path) -> None:
        from minigpt.logs.samples import read_samples

        try:
            st = path.stat()
            seen = (st.st_size, st.st_mtime_ns)
        except OSError:
            seen = None
        if seen is not None and seen == self._seen:
            return
        samples = read_samples(path) if seen is not None else []
        self._seen = seen
        self.app.call_from_thread(self._show, samples_text(samples, str(path)))

    def _show(self, text: Text) -> None:
        self.query_one(Static).update(text)
