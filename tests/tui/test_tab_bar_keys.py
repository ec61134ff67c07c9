"""The page keys on the tab bar page the shown pane: without a mouse they are the only way down."""

from __future__ import annotations

from textual.widgets import DataTable, Tabs

from .conftest import wait_for_report, wait_until


async def test_page_down_on_the_tab_bar_pages_the_checks_table(workspace, make_app):
    # GIVEN the checks at 80x24 (more rows than fit) and the focus on the tab bar
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        table = app.panes["checks"].query_one(DataTable)
        app.query_one(Tabs).focus()
        await wait_until(pilot, lambda: isinstance(app.focused, Tabs), 10, "the tab bar's focus")
        # WHEN PageDown
        await pilot.press("pagedown")
        # THEN the table shows a later page, and holds the focus for the keys that follow
        await wait_until(pilot, lambda: table.cursor_row > 0, 10, "the table to page down")
        assert app.focused is table and table.scroll_y > 0
        # WHEN PageUp on the tab bar THEN the table is back at its top
        app.query_one(Tabs).focus()
        await pilot.press("pageup")
        await wait_until(pilot, lambda: table.cursor_row == 0, 10, "the table's first page")


async def test_page_down_on_the_tab_bar_pages_a_pane_built_after_the_first_frame(workspace, make_app):
    # GIVEN the Gradients pane (mounted after the first frame) with the training log's table, at 80x24
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("5")
        await wait_until(pilot, lambda: "gradients" in app.panes, 10, "the gradients pane")
        table = app.panes["gradients"].query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count > 20, 10, "the gradients table")
        app.query_one(Tabs).focus()
        await wait_until(pilot, lambda: isinstance(app.focused, Tabs), 10, "the tab bar's focus")
        # WHEN PageDown THEN its table shows a later page
        await pilot.press("pagedown")
        await wait_until(pilot, lambda: table.cursor_row > 0, 10, "the gradients table to page down")
