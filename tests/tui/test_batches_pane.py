"""Pane 4: inputs over targets char by char; target[t] != input[t+1] is marked."""

from __future__ import annotations

from minigpt_tui.panes.batches import BAD_MARK, BatchesPane, mismatches
from tests.waiting import wait_until

from .conftest import SIZE, rendered, wait_for_report


def test_mismatches_compare_each_target_with_the_next_input():
    assert mismatches([1, 2, 3, 4], [2, 3, 4, 9]) == []
    assert mismatches([1, 2, 3, 4], [1, 2, 3, 4]) == [0, 1, 2]


async def test_a_correct_batch_has_no_mismatch_markers(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("4")
        pane = app.query_one(BatchesPane)
        await wait_until(pilot, lambda: pane.drawn is not None and pane.shift_check is not None, what="a batch")
        text = rendered(pane.query_one("#batch-view"))
        assert pane.mismatch_count == 0
        assert BAD_MARK not in text
        assert "✓ pass" in text and "targets are inputs shifted by one" in text
        assert "input" in text and "target" in text


async def test_no_shift_fault_shows_mismatch_markers(workspace, make_app):
    app = make_app(workspace, fault="no_shift")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("4")
        pane = app.query_one(BatchesPane)
        await wait_until(pilot, lambda: pane.drawn is not None and pane.shift_check is not None, what="a batch")
        text = rendered(pane.query_one("#batch-view"))
        assert pane.drawn.fault == "no_shift"
        assert pane.mismatch_count > 0
        assert f"{BAD_MARK} fail" in text  # the batch_shift check's status
        assert "t→t+1    " + BAD_MARK in text


async def test_rows_and_new_batches_are_navigable(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        pane = app.query_one(BatchesPane)
        await wait_until(pilot, lambda: pane.drawn is not None, what="a batch")
        assert app.focused is pane
        await pilot.press("j", "down")
        assert pane.row == 2
        await pilot.press("k")
        assert pane.row == 1
        first = pane.drawn
        await pilot.press("n")
        await wait_until(pilot, lambda: pane.drawn is not first, what="a new batch")
        assert pane.drawn.seed == 1 and pane.drawn.inputs != first.inputs


async def test_an_unreadable_tokenizer_is_shown_in_the_pane_not_an_endless_wait(workspace, make_app):
    (workspace / "tokenizer" / "char_tokenizer.json").write_text("not json {")
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        view = app.query_one("#batch-view")
        await wait_until(pilot, lambda: "cannot draw a batch" in rendered(view), what="the batch error")
        text = " ".join(rendered(view).split())
        assert "char_tokenizer.json" in text and "tokenizer" in text.split("char_tokenizer.json", 1)[1]
        assert app.is_running
