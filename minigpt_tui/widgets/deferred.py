"""Render work that waits until a pane is on screen.

Updating a widget in a hidden tab still costs a layout pass of the whole screen; during a check
run that is one per message for every pane. A pane keeps only the newest pending render per key
and runs them when it is shown, so its work is proportional to what is visible."""

from __future__ import annotations

from collections.abc import Callable

from textual import events, on
from textual.widget import Widget


class RenderWhenShown(Widget):
    """Base for a pane, after its container class (`class P(VerticalScroll, RenderWhenShown)`:
    Textual follows the first base for CSS, so the container's sizing must come first):
    `render_when_shown(key, fn)` runs `fn` now if the pane is on screen, else keeps it (the
    newest per key) until the pane is shown. A Widget so Textual registers its `@on` handler."""

    _pending_renders: dict[str, Callable[[], None]]

    def render_when_shown(self, key: str, fn: Callable[[], None]) -> None:
        if not hasattr(self, "_pending_renders"):
            self._pending_renders = {}
        if self.is_mounted and self.region.area > 0:
            self._pending_renders.pop(key, None)
            fn()
        else:
            self._pending_renders[key] = fn

    @on(events.Show)
    def _run_pending_renders(self) -> None:
        pending, self._pending_renders = getattr(self, "_pending_renders", {}), {}
        for fn in pending.values():
            fn()
