"""The page keys on the tab bar page the shown pane: without a mouse they are the only way down."""

from __future__ import annotations

from textual.widgets import DataTable, Tabs

from tests.waiting import wait_until

from .conftest import wait_for_report


async def _checks_table_with_the_tab_bar_focused(pilot, app) -> DataTable:
    """The checks at 80x24 (more rows than fit), the focus on the tab bar: the table it pages."""
    await wait_for_report(pilot, app)
    app.query_one(Tabs).focus()
    await wait_until(pilot, lambda: isinstance(app.focused, Tabs), what="the tab bar's focus")
    return app.panes["checks"].query_one(DataTable)


async def test_page_down_on_the_tab_bar_pages_the_checks_table(workspace, make_app):
    # GIVEN the checks at 80x24 (more rows than fit) and the focus on the tab bar
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _checks_table_with_the_tab_bar_focused(pilot, app)
        # WHEN PageDown
        await pilot.press("pagedown")
        # THEN the table shows a later page, and holds the focus for the keys that follow
        await wait_until(pilot, lambda: table.cursor_row > 0, what="the table to page down")
        assert app.focused is table and table.scroll_y > 0
        # WHEN PageUp on the tab bar THEN the table is back at its top
        app.query_one(Tabs).focus()
        await pilot.press("pageup")
        await wait_until(pilot, lambda: table.cursor_row == 0, what="the table's first page")


async def test_page_down_on_the_tab_bar_pages_a_pane_built_after_the_first_frame(workspace, make_app):
    # GIVEN the Gradients pane (mounted after the first frame) with the training log's table, at 80x24
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("5")
        await wait_until(pilot, lambda: "gradients" in app.panes, what="the gradients pane")
        table = app.panes["gradients"].query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count > 20, what="the gradients table")
        app.query_one(Tabs).focus()
        await wait_until(pilot, lambda: isinstance(app.focused, Tabs), what="the tab bar's focus")
        # WHEN PageDown THEN its table shows a later page
        await pilot.press("pagedown")
        await wait_until(pilot, lambda: table.cursor_row > 0, what="the gradients table to page down")


async def test_end_and_home_on_the_tab_bar_take_the_shown_pane_to_its_end_and_top(workspace, make_app):
    # GIVEN the checks at 80x24 (more rows than fit) and the focus on the tab bar
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        table = await _checks_table_with_the_tab_bar_focused(pilot, app)
        # WHEN End THEN the table's last row is selected and in view
        await pilot.press("end")
        await wait_until(pilot, lambda: table.cursor_row == table.row_count - 1, what="the table's last row")
        assert app.focused is table and table.scroll_y > 0
        # WHEN Home on the tab bar THEN back to the first row
        app.query_one(Tabs).focus()
        await pilot.press("home")
        await wait_until(pilot, lambda: table.cursor_row == 0 and table.scroll_y == 0, what="the table's top")


async def test_the_help_names_the_tab_bar_paging_keys(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: app.screen.query("#help-keys"), what="the help")
        from minigpt_tui.screens.help import key_sections

        rows = dict(key_sections(app, [("checks", "Checks")]))["everywhere"]
        assert any("pgdn" in keys and "end" in keys and "tab bar" in what for keys, what in rows)
