"""Keys that arrive faster than a modal screen closes: a screen answers once, and the app never
dies of a second answer (f, enter, escape typed in a burst on the fault menu exited 1 with
InvalidStateError or ScreenStackError)."""

from __future__ import annotations

from textual.widgets import OptionList

from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.screens.faults import FaultMenuScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.workbench import PANES
from tests.waiting import wait_until

from .conftest import SIZE


async def test_a_choice_and_an_escape_in_one_frame_on_the_fault_menu_leave_the_app_running(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultMenuScreen), what="the fault menu")
        menu = app.screen
        # WHEN enter and escape are handled before the menu is gone (typed in one burst over SSH)
        options = menu.query_one(OptionList)
        menu.choose(OptionList.OptionSelected(options, options.get_option_at_index(0), 0))
        menu.action_cancel()
        # THEN the menu answered once (the fault chosen) and the app runs on with its own screen
        await wait_until(pilot, lambda: app.fault_name is not None and app.screen is not menu, what="one answer")
        assert app.is_running and app.return_code is None
        # AND bursts of the same keys through the real key path change nothing of that
        for _ in range(4):
            await pilot.press("f", "enter", "escape", "f", "escape", "enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, FaultMenuScreen), what="no menu left")
        assert app.is_running and app.return_code is None


async def test_a_screen_dismissed_twice_answers_once(workspace, make_app):
    app = make_app(workspace)
    answers: list[bool] = []
    async with app.run_test(size=SIZE) as pilot:
        screen = ConfirmScreen("Go?", yes="Yes", no="No")
        app.push_screen(screen, answers.append)
        await wait_until(pilot, lambda: app.screen is screen, what="the dialog")
        # WHEN two answers arrive before the screen is gone (a click and a key in one frame)
        screen.answer(True)
        screen.answer(False)
        # THEN the first is the answer, the second is dropped, and the app runs on
        await wait_until(pilot, lambda: answers == [True] and app.screen is not screen, what="one answer")
        app.push_screen(HelpScreen(PANES))
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.press("escape", "escape")  # the second one reaches the app beneath
        await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), what="help closed")
        assert app.is_running and answers == [True]
