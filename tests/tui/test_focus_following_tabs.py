"""The tabs follow a programmatic focus into another pane, but not a focus that no longer stands
(workbench.FocusFollowingTabs: a public handler that runs before TabbedContent's own)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Button, TabPane

from minigpt_tui.workbench import FocusFollowingTabs
from tests.waiting import stays, wait_until


class TwoTabs(App):
    def compose(self) -> ComposeResult:
        with FocusFollowingTabs(initial="a"):
            with TabPane("A", id="a"):
                yield Button("in a", id="button-a")
            with TabPane("B", id="b"):
                yield Button("in b", id="button-b")


async def test_a_focus_into_another_pane_shows_that_pane():
    app = TwoTabs()
    async with app.run_test() as pilot:
        tabs = app.query_one(FocusFollowingTabs)
        app.query_one("#button-a").focus()
        await pilot.pause()
        # WHEN a widget of the hidden pane gets the focus THEN its pane is shown
        app.query_one("#button-b").focus()
        await wait_until(pilot, lambda: tabs.active == "b", what="pane b to show")


async def test_a_stale_pane_focus_message_leaves_the_shown_pane():
    app = TwoTabs()
    async with app.run_test() as pilot:
        tabs = app.query_one(FocusFollowingTabs)
        button_a = app.query_one("#button-a")
        button_a.focus()
        await wait_until(pilot, lambda: tabs.active == "a" and app.focused is button_a, what="the focus in pane a")
        # WHEN pane b says one of its widgets got the focus, but the focus is in pane a by then
        tabs.post_message(TabPane.Focused(tabs.query_one("#b", TabPane)))
        # THEN pane a stays shown
        await stays(pilot, lambda: tabs.active == "a" and app.focused is button_a, 0.5, what="pane a shown, focused")
        assert tabs.active == "a"
        assert app.focused is app.query_one("#button-a")
