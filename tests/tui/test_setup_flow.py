"""The first run on a folder that is no workspace: the offer says what it will do (open the demo when
it is built already), and the header says what is on screen while nothing is being checked."""

from __future__ import annotations

import shutil

from minigpt_tui import demo
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.screens.setup import DemoSetupScreen
from tests.waiting import wait_until

from .conftest import SIZE


async def test_an_empty_folder_offers_to_open_the_demo_that_is_already_built(
    tmp_path, workspace, make_app, monkeypatch
):
    # GIVEN a demo built before (a finished workspace with its ready marker) and an empty folder
    built = tmp_path / "cache" / "demo"
    shutil.copytree(workspace, built)
    (built / demo.READY_MARKER).write_text("ready\n")
    monkeypatch.setattr(demo, "demo_dir", lambda: built)
    empty = tmp_path / "empty"
    empty.mkdir()
    app = make_app(empty)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the offer")
        # THEN it offers to open the demo as it is, never to build and train it again
        text = str(app.screen.question)
        assert "already built" in text and str(built) in text
        assert "train it for" not in text
        # and the header does not claim a check is running
        assert "checking" not in app.sub_title and "no workspace" in app.sub_title


async def test_the_header_says_the_demo_is_being_built_while_it_is(tmp_path, make_app, monkeypatch):
    # GIVEN --demo with no demo built yet
    where = tmp_path / "cache" / "demo"
    monkeypatch.setattr(demo, "demo_dir", lambda: where)
    app = make_app(where, demo_mode=True)
    async with app.run_test(size=SIZE) as pilot:
        # WHEN the build runs on its screen THEN the header says so, not "checking…"
        await wait_until(pilot, lambda: isinstance(app.screen, DemoSetupScreen), what="the build screen")
        assert "building the demo" in app.sub_title and "checking" not in app.sub_title
        await pilot.press("q")  # cancel the build and quit
        await wait_until(pilot, lambda: not app.is_running, what="the app to quit")
