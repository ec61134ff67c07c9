"""The Loss pane's training line: the question it asks before a fresh run moves the old one aside."""

from __future__ import annotations

import pytest

from minigpt.checks import CheckOptions
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.session import Session
from tests.waiting import wait_until

from ._pane_harness import PaneHarness


@pytest.mark.parametrize("fault", [None, "no_shift"])
async def test_the_question_names_an_injected_fault_only_when_one_is_set(demo_ws, fault):
    # GIVEN a workspace with a run in it, and the checks with or without an injected fault
    session = Session(CheckOptions(workspace=demo_ws.root, device="cpu", fault=fault))
    app = PaneHarness(LossPane, demo_ws, session=session)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        pane.controls.train_args = ["--preset", "debug"]
        demo_ws.checkpoints.mkdir(parents=True, exist_ok=True)
        demo_ws.best_checkpoint.write_bytes(b"an earlier run")
        pane.focus()
        # WHEN s asks to train
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = app.screen.question
        await pilot.press("n")
    # THEN the question speaks of a fault only when there is one, and names it
    assert ("fault" in question) == (fault is not None)
    if fault:
        assert f"fault {fault} does not apply" in question
