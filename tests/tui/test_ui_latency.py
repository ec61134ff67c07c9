"""What keeps the UI quick, checked by what happens rather than by timing: the hidden panes are built
after the first frame, the footer is rebuilt only when its keys change, the containers above a pane
are drawn as plain background, and the GIL hand-off interval the app sets while it runs is given
back at exit."""

from __future__ import annotations

import subprocess
import sys

import pytest
from textual._styles_cache import StylesCache
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Size
from textual.widgets import Button, Footer, Header, Static, TabbedContent, TabPane

from minigpt_tui.runtime import SWITCH_INTERVAL_S
from minigpt_tui.widgets.blank import blank_allowed
from minigpt_tui.widgets.key_footer import KeyFooter
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.steady_table import SteadyTable
from minigpt_tui.workbench import PANES, PaneTab, Workbench
from tests.waiting import eventually, stays, wait_until

from .conftest import SIZE, wait_for_report


@pytest.mark.slow
def test_composing_the_app_imports_no_pane_but_the_checks_pane(workspace, tmp_path):
    # GIVEN a script that composes the app headless (its first frame) and lists the pane modules loaded
    script = tmp_path / "first_frame.py"  # a file: Textual reads the class's source to place its CSS
    script.write_text(
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "import minigpt_tui.app\n"
        "from minigpt_tui.app import MiniGPTApp\n"
        "class First(MiniGPTApp):\n"
        "    CSS_PATH = Path(minigpt_tui.app.__file__).with_name(MiniGPTApp.CSS_PATH)\n"
        "    def on_mount(self):\n"
        "        self.seen = sorted(m for m in sys.modules if m.startswith('minigpt_tui.panes.'))\n"
        "        self.exit()\n"
        f"app = First({str(workspace)!r})\n"
        "asyncio.run(app.run_async(headless=True, size=(80, 24)))\n"
        "print(' '.join(app.seen))\n"
    )
    # WHEN it runs in its own interpreter
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    # THEN only the checks pane's module was loaded by then
    assert out.stdout.split() == ["minigpt_tui.panes.checks"], out.stdout


async def test_the_hidden_panes_are_mounted_in_their_tabs_after_the_first_frame(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:

        def built() -> None:
            assert list(app.panes) == [pane_id for pane_id, _ in PANES]
            for pane_id, pane in app.panes.items():
                assert pane.is_mounted, pane_id
                assert pane.parent is not None and pane.parent.id == pane_id  # in its own tab

        await eventually(pilot, built)
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() != SWITCH_INTERVAL_S  # given back at exit


def _all_panes_mounted(app) -> bool:
    return len(app.panes) == len(PANES) and all(pane.is_mounted for pane in app.panes.values())


class TwoPanes(App):
    """Two focusable panes: A and B share their keys, C adds one."""

    BINDINGS = [Binding("q", "quit", "Quit")]

    def __init__(self, footer: type[Footer]) -> None:
        super().__init__()
        self.footer = footer

    def compose(self) -> ComposeResult:
        yield Pane(id="a")
        yield Pane(id="b")
        yield PaneWithKey(id="c")
        yield self.footer()


class Pane(Vertical, can_focus=True):
    def compose(self) -> ComposeResult:
        yield Static(self.id or "")


class PaneWithKey(Pane):
    BINDINGS = [Binding("n", "app.bell", "New")]


class CountedFooter(KeyFooter):
    """A KeyFooter that counts the times its keys are replaced (each replacement redraws it), and the
    times it looked at the screen's bindings after a change."""

    replaced = settled = 0

    def _bindings_settled(self, screen) -> None:
        super()._bindings_settled(screen)
        self.settled += 1

    @property  # type: ignore[override]
    def keys(self) -> tuple:
        return self._counted_keys

    @keys.setter
    def keys(self, keys: tuple) -> None:
        self._counted_keys = keys
        self.replaced += 1


def _descriptions(app: App) -> list[str]:
    return [key.description for key in app.query_one(KeyFooter).keys]


async def test_the_footer_is_redrawn_only_when_focus_brings_other_keys():
    app = TwoPanes(CountedFooter)
    async with app.run_test() as pilot:
        app.query_one("#a").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["Quit", "palette"], what="pane a's keys")
        footer = app.query_one(CountedFooter)
        replaced, settled = footer.replaced, footer.settled
        # WHEN the focus moves to a pane with the same keys, and the footer has looked at the new bindings
        b = app.query_one("#b")
        b.focus()
        await wait_until(pilot, lambda: b.has_focus and footer.settled > settled, what="the footer seeing b's keys")
        # THEN it was not redrawn, and it is still one widget (no widget per key to mount)
        await stays(
            pilot, lambda: footer.replaced == replaced and not footer.children, 0.3, what="the footer not redrawn"
        )
        # WHEN it moves to a pane with a key of its own THEN the footer shows it, as Textual's does
        app.query_one("#c").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["New", "Quit", "palette"], what="pane c's keys")
        assert footer.replaced == replaced + 1
        app.query_one("#a").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["Quit", "palette"], what="pane a's keys again")


async def test_the_footer_draws_its_keys_on_one_line_and_a_click_presses_one():
    app = TwoPanes(KeyFooter)
    async with app.run_test(size=(60, 6)) as pilot:
        app.query_one("#c").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["New", "Quit", "palette"], what="pane c's keys")
        footer = app.query_one(KeyFooter)
        # THEN the keys read as Textual's compact footer writes them: key, description, a space between
        assert footer.render().plain.startswith("n New q Quit ^p palette")
        # WHEN the footer's "q" is clicked THEN the app quits, as with Textual's footer
        await pilot.click(KeyFooter, offset=(footer.render().plain.index("q"), 0))
        # no pilot to pause with: the pilot's pause needs a screen, which the quitting app takes down
        await wait_until(None, lambda: not app.is_running, what="the app to quit")


class RecordedLines(LiveStatic):
    """A LiveStatic that notes, for each update, whether it asked Textual for a layout."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.layouts: list[bool] = []  # per update: did it call refresh(layout=True)
        self._updating = False

    def update(self, *args, **kwargs) -> None:
        self._updating = True
        self.layouts.append(False)
        try:
            super().update(*args, **kwargs)
        finally:
            self._updating = False

    def refresh(self, *args, **kwargs):
        if self._updating and kwargs.get("layout"):
            self.layouts[-1] = True
        return super().refresh(*args, **kwargs)


class Lines(App):
    CSS = "#auto { width: auto; }"

    def compose(self) -> ComposeResult:
        yield RecordedLines("one\ntwo", id="fill")
        yield RecordedLines("short", id="auto")


async def test_a_live_static_skips_the_layout_only_when_its_size_cannot_change():
    app = Lines()
    async with app.run_test(size=(40, 10)) as pilot:
        fill, auto = app.query_one("#fill", RecordedLines), app.query_one("#auto", RecordedLines)
        await wait_until(
            pilot, lambda: fill.size.height == 2 and auto.size.width == len("short"), what="the first layout"
        )
        fill.layouts.clear()  # the updates below, not the first draw
        # WHEN a line changes and the content keeps its two lines THEN only the widget is redrawn
        fill.update("three\nfour")

        def redrawn() -> None:
            assert fill.layouts == [False] and fill.render_line(0).text.startswith("three")

        await eventually(pilot, redrawn)
        # WHEN it grows a line THEN it is laid out again and takes three rows
        fill.update("three\nfour\nfive")

        def grown() -> None:
            assert fill.layouts == [False, True] and fill.size.height == 3

        await eventually(pilot, grown)
        # WHEN a `width: auto` line gets longer THEN it is laid out again and gets wider
        auto.update("a longer line")

        def wider() -> None:
            assert auto.layouts == [True] and auto.size.width == len("a longer line")

        await eventually(pilot, wider)


class CountedTable(SteadyTable):
    """A SteadyTable that counts the Resizes and restyles it kept its lines through, and its drops."""

    resizes_kept = restyles = drops = 0

    def keeps_lines_at(self, size: Size) -> bool:
        kept = super().keeps_lines_at(size)
        self.resizes_kept += kept
        return kept

    def restyled(self) -> None:
        self.restyles += 1
        super().restyled()

    def drop_rendered_lines(self) -> None:
        self.drops += 1
        super().drop_rendered_lines()


class TableTabs(App):
    """A table in one tab, a line in the other; keys a/b switch and move the focus as the inspector does."""

    BINDINGS = [Binding("a", "show('a')"), Binding("b", "show('b')")]
    CSS = "#table { width: 1fr; } #table.alert > .datatable--cursor { background: red; }"

    def compose(self) -> ComposeResult:
        with TabbedContent():
            with TabPane("table", id="a"):
                yield CountedTable(id="table")
            with TabPane("line", id="b"):
                yield Button("line", id="line")

    def on_mount(self) -> None:
        table = self.query_one(SteadyTable)
        table.add_columns("name", "value")
        table.add_rows((f"row {i}", f"{i * 0.1:.1f}") for i in range(8))
        table.focus()

    def action_show(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        self.query_one("#table" if tab == "a" else "#line").focus()


def _frames(widget) -> list[int]:
    """A counter of the times the compositor draws `widget` (cached lines or not)."""
    calls = [0]
    render_lines = widget.render_lines

    def counted(crop):
        calls[0] += 1
        return render_lines(crop)

    widget.render_lines = counted  # type: ignore[method-assign]
    return calls


def _cells_rendered(table: SteadyTable) -> list[int]:
    calls = [0]
    render_cell = table._render_cell

    def counted(*args, **kwargs):
        calls[0] += 1
        return render_cell(*args, **kwargs)

    table._render_cell = counted  # type: ignore[method-assign]
    return calls


async def test_a_table_shown_again_keeps_its_lines_and_a_restyle_redraws_them():
    app = TableTabs()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        table = app.query_one(CountedTable)
        calls = _cells_rendered(table)
        drops = table.drops
        # WHEN the user leaves the table's tab and comes back (a same-size Resize, a blur, a focus)
        await pilot.press("b")
        line = app.query_one("#line")
        await wait_until(pilot, lambda: line.has_focus and not table.is_on_screen, what="the table's tab left")
        frames = _frames(table)
        await pilot.press("a")
        await wait_until(
            pilot,
            lambda: table.has_focus and frames[0] > 0 and table.resizes_kept >= 1 and table.restyles >= 1,
            what="the table shown and drawn again",
        )
        # THEN no cell was rendered again: the lines drawn before are drawn as they were
        assert table.resizes_kept >= 1 and table.restyles >= 1 and table.drops == drops
        assert calls[0] == 0 and table.has_focus
        cursor_before = next(iter(table.render_line(1))).style
        # WHEN a restyle changes how the cursor row looks and nothing else (the lines' cache keys stay the same)
        table.add_class("alert")
        # THEN the cells are rendered again, the cursor row in its new colour
        await wait_until(pilot, lambda: calls[0] > 0, what="the table drawn again")
        cursor_now = next(iter(table.render_line(1))).style
        assert cursor_now is not None and cursor_now != cursor_before
        assert cursor_now.bgcolor is not None and tuple(cursor_now.bgcolor.get_truecolor()) == (255, 0, 0)
        # WHEN the terminal gets wider THEN the Resize is not kept from the table: it draws at the new width
        kept = table.resizes_kept
        await pilot.resize_terminal(60, 12)
        await wait_until(pilot, lambda: table.size.width == 60, what="the table at the new size")
        assert table.resizes_kept == kept and table.render_line(1).cell_length == 60


async def test_a_table_restyled_while_its_tab_is_hidden_is_compared_before_it_is_shown_again():
    app = TableTabs()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.pause()
        table = app.query_one(CountedTable)
        await pilot.press("b")
        await pilot.pause()
        drops = table.drops
        # WHEN the hidden table's cursor row changes look
        table.add_class("alert")
        # THEN its lines are dropped while it is hidden, not in the frame that shows it again
        await wait_until(pilot, lambda: table.drops == drops + 1, what="the hidden table's lines dropped")
        calls = _cells_rendered(table)
        await pilot.press("a")
        await wait_until(pilot, lambda: calls[0] > 0, what="the table drawn again")
        cursor = next(iter(table.render_line(1))).style
        assert cursor is not None and cursor.bgcolor is not None
        assert tuple(cursor.bgcolor.get_truecolor()) == (255, 0, 0)


@pytest.mark.slow
async def test_a_frame_that_does_not_reach_the_footer_does_not_redraw_it(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await wait_until(pilot, lambda: _all_panes_mounted(app), what="the hidden panes built")
        await pilot.pause(0.5)  # the footer's keys settled
        footer = app.query_one(KeyFooter)
        drawn = [0]
        render_lines = footer.render_lines

        def counted(crop):
            drawn[0] += 1
            return render_lines(crop)

        footer.render_lines = counted  # type: ignore[method-assign]
        # WHEN a line in the middle of the screen is redrawn (a tab's underline sliding, a table row)
        underline = app.query_one("Underline")
        underline_frames = _frames(underline)
        for n in range(1, 4):
            underline.refresh()
            await wait_until(pilot, lambda n=n: underline_frames[0] >= n, what="the underline drawn again")
        # THEN the footer on the last row is not drawn again (a child of the screen would be, every frame)
        assert drawn[0] == 0


def test_the_tab_underline_does_not_slide_unless_the_user_asks_for_animations(workspace, make_app, monkeypatch):
    # GIVEN no TEXTUAL_ANIMATIONS: the app draws no animation frames (a sliding underline is ~15 a switch)
    monkeypatch.delenv("TEXTUAL_ANIMATIONS", raising=False)
    assert make_app(workspace).animation_level == "none"
    # GIVEN the user's own setting THEN it is kept
    monkeypatch.setenv("TEXTUAL_ANIMATIONS", "full")
    assert make_app(workspace).animation_level != "none"


def test_containers_are_drawn_blank_unless_a_filter_recolours_the_whole_screen():
    assert blank_allowed({}, "")
    assert not blank_allowed({"NO_COLOR": "1"}, "")  # Textual's monochrome filter would skip them
    assert not blank_allowed({}, "dim")


@pytest.mark.slow
async def test_a_pane_switch_draws_the_containers_above_each_pane_as_plain_background(workspace, make_app, monkeypatch):
    # GIVEN the app with every pane built, and every line drawn through Textual's styles recorded
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await wait_until(pilot, lambda: _all_panes_mounted(app), what="every pane built")
        await pilot.pause(0.5)
        drawn = []
        render_widget = StylesCache.render_widget

        def recorded(self, widget, crop):
            drawn.append(widget)
            return render_widget(self, widget, crop)

        monkeypatch.setattr(StylesCache, "render_widget", recorded)
        # WHEN the user goes through all seven panes, each drawn before the next key
        for key in "2345671":
            pane = app.panes[PANES[int(key) - 1][0]]
            start = len(drawn)
            await pilot.press(key)
            await wait_until(
                pilot,
                lambda pane=pane, start=start: pane.is_on_screen and any(pane in w.ancestors for w in drawn[start:]),
                what=f"pane {key} drawn",
            )
        # THEN the header, the tabs widget, each tab page, each pane and the footer's bar were drawn
        # as their background (Textual's BLANK), not line by line: a switch clears their line caches
        tabs = list(app.query(PaneTab))
        stack = {app.query_one(Workbench), app.query_one(Header)}
        stack |= {app.query_one("#footer-bar"), *tabs, *(tab.children[0] for tab in tabs)}
        assert len(stack) == 3 + 2 * len(PANES)
        assert drawn and not stack & set(drawn)
