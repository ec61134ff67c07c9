"""The settings grid, driven by keys and clicks as a person would: alone in a small app, and in the
real app's sampler pane (where a typed digit or letter is the cell's, not a pane key)."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.widgets import Input, TabbedContent

from minigpt_tui.panes.sampler import SamplerPane
from minigpt_tui.widgets.settings_grid import SettingsGrid
from tests.waiting import eventually, wait_until

from .conftest import rendered, wait_for_report


class GridApp(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[str, str, str]] = []
        self.submitted: list[tuple[str, str]] = []

    def compose(self) -> ComposeResult:
        yield Input(id="before")
        yield SettingsGrid(
            [("t", "temperature"), ("k", "top-k"), ("s", "seed")],
            ["A", "B"],
            {("A", "t"): "1.0", ("B", "t"): "0.7", ("A", "k"): "", ("B", "k"): "10", ("A", "s"): "0"},
            fixed={("B", "s"): "same as A"},
            corner="setting",
        )

    def on_settings_grid_changed(self, event: SettingsGrid.Changed) -> None:
        self.changes.append((event.column, event.row, event.text))

    def on_settings_grid_submitted(self, event: SettingsGrid.Submitted) -> None:
        self.submitted.append((event.column, event.row))


async def test_typing_replaces_a_cell_just_entered_then_appends():
    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        grid.focus()
        await pilot.press("0", ".", "5")
        assert grid.text("A", "t") == "0.5"  # the first key replaced 1.0, the next ones appended
        await pilot.press("backspace", "8")
        assert grid.text("A", "t") == "0.8"
        await pilot.press("right", "delete")
        assert grid.text("B", "t") == ""
        assert app.changes[-1] == ("B", "t", "")
        await pilot.press("down")
        app.post_message(events.Paste("0.25\nmore"))  # a paste goes where the focus is
        await wait_until(pilot, lambda: grid.text("B", "k") == "0.25", what="the paste in B's top-k")


async def test_a_burst_of_keys_lands_in_order():
    # a move and the key typed right behind it: the key goes in the cell moved to
    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        grid.focus()
        await pilot.pause()
        for key in ("down", "3", "right", "backspace", "down"):
            app.post_message(_key(key))  # queued at once, as a terminal's burst is

        def landed():
            assert grid.text("A", "k") == "3"
            assert grid.text("B", "k") == "1"
            assert grid.text("A", "t") == "1.0"
            assert grid.cursor == ("B", "k")  # B's seed is fixed: down stays where it is

        await eventually(pilot, landed)


def _key(key: str):
    return events.Key(key, key if len(key) == 1 else None)


async def test_the_arrows_step_over_fixed_cells_and_stop_at_the_edges():
    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        grid.focus()
        await pilot.press("up", "left")
        assert grid.cursor == ("A", "t")
        await pilot.press("down", "down", "right")
        assert grid.cursor == ("A", "s")  # B's seed is shown, not edited
        await pilot.press("right", "up")
        assert grid.cursor == ("A", "k")
        await pilot.press("enter")
        assert app.submitted == [("A", "k")]


async def test_a_click_selects_the_cell_under_it_and_focuses_the_grid():
    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        assert app.focused is app.query_one("#before")
        width = (grid.content_size.width - grid.label_width) // 2
        await pilot.click(SettingsGrid, offset=(grid.label_width + width + 1, 2))  # B, row 2 (top-k)
        assert app.focused is grid and grid.cursor == ("B", "k")
        await pilot.press("5")
        assert grid.text("B", "k") == "5"


async def test_it_draws_the_labels_values_and_marks():
    app = GridApp()
    async with app.run_test(size=(60, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        grid.mark_invalid([("A", "t")])

        def drawn():
            lines = grid.render().plain.splitlines()
            assert lines[0].split() == ["setting", "A", "B"]
            assert lines[1].split() == ["temperature", "1.0", "0.7"]
            assert lines[3].split() == ["seed", "0", "same", "as", "A"]
            assert grid.is_invalid("A", "t") and not grid.is_invalid("B", "t")
            # the keys show after the headers while the grid has the focus, and only then
            assert "move" not in lines[0]

        await eventually(pilot, drawn)
        grid.focus()

        def keys_shown():
            assert grid.render().plain.splitlines()[0].split()[:4] == ["setting", "A", "B", "←↑↓→"]

        await eventually(pilot, keys_shown)


async def test_in_the_sampler_typed_digits_and_letters_are_the_cells_not_pane_keys(workspace, make_app):
    # GIVEN the real app's sampler pane, the settings grid focused by Tab
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("7")
        await pilot.pause()
        pane = app.panes["sampler"]
        grid = pane.query_one(SettingsGrid)
        for _ in range(len(app.screen.focus_chain)):
            if app.focused is grid:
                break
            await pilot.press("tab")
        assert app.focused is grid
        # WHEN a person types a seed (digits switch panes elsewhere) and a letter (q quits elsewhere)
        await pilot.press("down", "down", "down", "down", "down", "4", "2")

        # THEN the seed is A's and B's, the pane is still shown, and the app still running
        def seeded():
            assert grid.text("A", "seed") == "42"
            assert pane.columns["A"].values["seed"] == pane.columns["B"].values["seed"] == 42
            assert app.query_one(TabbedContent).active == "sampler"

        await eventually(pilot, seeded)
        await pilot.press("q")

        def flagged():
            assert app.is_running and grid.is_invalid("A", "seed")
            assert "seed" in rendered(pane.query_one("#field-errors"))

        await eventually(pilot, flagged)
        # AND escape leaves the grid for the tab bar, where digits switch panes again
        await pilot.press("escape", "1")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "checks", what="the checks pane")
        assert isinstance(pane, SamplerPane)


@pytest.mark.parametrize("width", [20, 30])  # columns of 3 and 8 cells
async def test_a_long_value_stays_in_its_column_with_its_end_in_view(width):
    app = GridApp()
    async with app.run_test(size=(width, 10)) as pilot:
        grid = app.query_one(SettingsGrid)
        grid.focus()
        await pilot.press(*"12345678901234567890")
        lines = grid.render().plain.splitlines()
        assert {len(line) for line in lines} == {grid.content_size.width}
        assert lines[1].split()[1] == ("…" if width == 20 else "…67890")  # the end, where the typing is
        assert lines[1].split()[-1] == ("0…" if width == 20 else "0.7")  # B's value where it was
