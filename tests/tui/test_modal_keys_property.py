"""Any sequence of keys on the modal screens (the fault menu, help, the command palette), typed one
by one or arriving in one burst, leaves the app running on its own screen and answering keys, or,
after `q`, ended cleanly: never a traceback, never a screen left that no key closes."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from textual import events
from textual.widgets import TabbedContent

from tests.waiting import wait_until

from .conftest import SIZE

# the keys that open a modal screen and those that answer one; `t` (a training run) is left out
MODAL_KEYS = ["f", "question_mark", "ctrl+p", "escape", "enter", "up", "down", "tab", "space", "y", "n", "r", "2"]


def _key(key: str) -> events.Key:
    character = "?" if key == "question_mark" else " " if key == "space" else key if len(key) == 1 else None
    return events.Key(key, character)


async def _drive(app, keys: list[str], burst: bool, then_quit: bool) -> None:
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: bool(app.panes), what="the panes")
        if burst:
            for key in keys:  # queued at once, as a terminal delivers a burst over SSH
                app.post_message(_key(key))
        else:
            for key in keys:
                await pilot.press(key)
        if then_quit:
            await pilot.press("escape", "escape", "escape", "q")
            await wait_until(pilot, lambda: not app.is_running, what="the app to quit")
            assert app.return_code == 0
            return
        # THEN escapes close whatever is open, and the app answers a pane key on its own screen
        await pilot.press("escape", "escape", "escape", "escape", "1")
        tabs = app.query_one(TabbedContent)
        await wait_until(pilot, lambda: tabs.active == "checks" and app.screen is app.screen_stack[0], what="pane 1")
        assert app.is_running and app.return_code is None


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.sampled_from(MODAL_KEYS), min_size=1, max_size=24),
    burst=st.booleans(),
    then_quit=st.booleans(),
)
@example(keys=["f", "enter", "escape"] * 4, burst=True, then_quit=False)  # exited 1 before (answer_once)
def test_any_keys_on_the_modal_screens_leave_the_app_running_or_quit_cleanly(
    workspace, make_app, keys, burst, then_quit
):
    # run_test re-raises an exception the app died of: a traceback fails the example
    asyncio.run(_drive(make_app(workspace), keys, burst, then_quit))
