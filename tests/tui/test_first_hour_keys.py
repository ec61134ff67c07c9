"""What the footer promises is what a key does: keys a new user pressed in their first hour."""

from __future__ import annotations

from textual.widgets import Input, TabbedContent

from minigpt_tui.widgets.key_footer import KeyFooter
from tests.waiting import eventually, wait_until

from .conftest import SIZE


def _footer(app) -> list[tuple[str, str]]:
    return [(k.key, k.description) for k in app.query_one(KeyFooter).keys]


async def test_a_sampler_button_with_the_focus_shows_the_keys_it_honours(workspace, make_app):
    # GIVEN the Sampler with one of its buttons focused (a click, or tab past the settings)
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("7")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "sampler", what="the Sampler")
        prompt = app.query_one("#prompt", Input)
        before = prompt.value
        app.query_one("#stop").focus()
        # THEN the footer does not offer r, f or t (typed letters go into the prompt there), only the way out
        await eventually(pilot, lambda: _check(_footer(app) == [("escape", "Leave field")], _footer(app)))
        # WHEN 6 is typed: it is text for the prompt, as the footer implies (no pane switch)
        await pilot.press("6")
        await wait_until(pilot, lambda: prompt.value == before + "6", what="the 6 typed into the prompt")
        assert app.query_one(TabbedContent).active == "sampler"
        # AND escape, as the footer says, gives the keys back: 6 then switches to the Loss pane
        await pilot.press("escape")
        await wait_until(pilot, lambda: ("r", "Rerun") in _footer(app), what="the app's keys back in the footer")
        await pilot.press("6")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "loss", what="the Loss pane")


def _check(ok: bool, seen: object) -> None:
    assert ok, seen
