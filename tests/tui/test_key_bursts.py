"""A burst of keys (a held key, a paste into the terminal) arrives faster than the screens change:
the UI stays up whatever the keys, the command palette included."""

from __future__ import annotations

import random

from textual import events
from textual.widgets import TabbedContent

from tests.waiting import wait_until

# what a held or pasted burst may hold: the palette opened and closed, pages, help, panes, letters
BURST_KEYS = ["ctrl+p", "escape", "escape", "pagedown", "pageup", "down", "question_mark", "1", "5", "7", "a"]


def _burst(app, keys: list[str]) -> None:
    """Every key queued at once, as a terminal delivers a paste: none waits for the last to be handled."""
    for key in keys:
        character = "?" if key == "question_mark" else key if len(key) == 1 else None
        app.post_message(events.Key(key, character))


async def test_a_burst_of_keys_through_the_command_palette_leaves_the_ui_running(workspace, make_app):
    # GIVEN the app on a workspace, its panes up
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: bool(app.panes), what="the panes")
        # WHEN 500 keys arrive at once: the palette opened, paged before its list is drawn, closed twice
        rng = random.Random(0)
        keys = [key for _ in range(50) for key in ("ctrl+p", "pagedown", "escape", "escape")]
        keys += [rng.choice(BURST_KEYS) for _ in range(300)]
        _burst(app, keys)
        # THEN the app is still running and answers the keys after the burst (queued behind it)
        await pilot.press("escape", "escape", "escape", "2")
        tabs = app.query_one(TabbedContent)
        await wait_until(pilot, lambda: tabs.active == "device" or not app.is_running, what="pane 2 to show")
        assert app.is_running and app.return_code is None
        assert tabs.active == "device"
