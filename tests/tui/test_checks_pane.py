"""Pane 1: rows fill in pipeline order, enter re-runs one check, the fault menu turns its check red."""

from __future__ import annotations

from minigpt_tui.panes.checks import ChecksPane
from minigpt_tui.screens.faults import FaultMenuScreen

from .conftest import SIZE, rendered, wait_for_report, wait_until


async def test_every_check_gets_a_row_with_a_status(workspace, make_app):
    from minigpt.checks import ordered_ids

    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        pane = app.query_one(ChecksPane)
        table = pane.table
        assert [key.value for key in table.rows] == ordered_ids()
        for cid in ordered_ids():
            status = str(table.get_cell(cid, "status"))
            assert status.split()[1] in ("pass", "warn", "skip"), (cid, status)  # mark + word, never colour alone
        assert report.by_id()["single_batch_overfit"].status.value == "skip"
        assert report.exit_code == 0


async def test_selecting_a_row_shows_values_causes_and_fixes(workspace, make_app):
    app = make_app(workspace, fault="no_shift")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        pane = app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=pane.table.get_row_index("batch_shift"))
        await pilot.pause()
        text = rendered(pane.query_one("#checks-detail-body"))
        assert "✗ fail batch_shift" in text
        assert "likely causes:" in text and "targets built as data[i:i+T]" in text
        assert "what to try:" in text and "targets_equal_inputs" in text


async def test_enter_reruns_the_highlighted_check_and_its_dependencies(workspace, make_app):
    from minigpt.checks import resolve_selection

    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        calls = []
        original = app.run_checks
        app.run_checks = lambda only=None: (calls.append(only), original(only))
        pane = app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=pane.table.get_row_index("batch_shift"))
        await pilot.press("enter")
        second = await wait_for_report(pilot, app, previous=first)
        assert calls == [["batch_shift"]]
        assert pane._run_total == len(resolve_selection(["batch_shift"])[0])
        assert len(second.results) == len(first.results)  # merged into the full report
        assert second.by_id()["batch_shift"] is not first.by_id()["batch_shift"]


async def test_r_reruns_every_check(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        await pilot.press("r")
        second = await wait_for_report(pilot, app, previous=first)
        assert len(second.results) == 20


async def test_fault_menu_injects_no_shift_and_batch_shift_turns_red(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        assert first.by_id()["batch_shift"].status.value == "pass"
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultMenuScreen), 20, "the fault menu")
        menu = app.screen.query_one("#fault-list")
        menu.highlighted = menu.get_option_index("no_shift")
        await pilot.press("enter")
        second = await wait_for_report(pilot, app, previous=first)
        assert app.session.fault == "no_shift"
        assert second.fault == "no_shift"
        assert second.by_id()["batch_shift"].status.value == "fail"
        assert str(app.query_one(ChecksPane).table.get_cell("batch_shift", "status")) == "✗ fail"
        # clearing it brings the pass back
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultMenuScreen), 20, "the fault menu")
        menu = app.screen.query_one("#fault-list")
        menu.highlighted = menu.get_option_index("__clear__")
        await pilot.press("enter")
        third = await wait_for_report(pilot, app, previous=second)
        assert third.by_id()["batch_shift"].status.value == "pass"
