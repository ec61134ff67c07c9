"""What keeps the UI quick, checked by what happens rather than by timing: the hidden panes are built
after the first frame, the footer is rebuilt only when its keys change, and the GIL hand-off
interval the app sets while it runs is given back at exit."""

from __future__ import annotations

import subprocess
import sys

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Footer, Static

from minigpt_tui.app import SWITCH_INTERVAL_S
from minigpt_tui.widgets.key_footer import KeyFooter
from minigpt_tui.workbench import PANES

from .conftest import SIZE, wait_until


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
        await pilot.pause()
        assert list(app.panes) == [pane_id for pane_id, _ in PANES]
        for pane_id, pane in app.panes.items():
            assert pane.is_mounted, pane_id
            assert pane.parent is not None and pane.parent.id == pane_id  # in its own tab
        assert sys.getswitchinterval() == SWITCH_INTERVAL_S
    assert sys.getswitchinterval() != SWITCH_INTERVAL_S  # given back at exit


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


def _descriptions(app: App) -> list[str]:
    return app.query_one(KeyFooter).descriptions()


async def test_the_footer_is_redrawn_only_when_focus_brings_other_keys():
    app = TwoPanes(KeyFooter)
    async with app.run_test() as pilot:
        app.query_one("#a").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["Quit", "palette"], 10, "pane a's keys")
        footer = app.query_one(KeyFooter)
        rebuilds = footer.rebuilds
        # WHEN the focus moves to a pane with the same keys, and the footer has had time to settle
        app.query_one("#b").focus()
        await pilot.pause(0.3)
        # THEN it was not redrawn, and it is still one widget (no widget per key to mount)
        assert footer.rebuilds == rebuilds and not footer.children
        # WHEN it moves to a pane with a key of its own THEN the footer shows it, as Textual's does
        app.query_one("#c").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["New", "Quit", "palette"], 10, "pane c's keys")
        assert footer.rebuilds == rebuilds + 1
        app.query_one("#a").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["Quit", "palette"], 10, "pane a's keys again")


async def test_the_footer_draws_its_keys_on_one_line_and_a_click_presses_one():
    app = TwoPanes(KeyFooter)
    async with app.run_test(size=(60, 6)) as pilot:
        app.query_one("#c").focus()
        await wait_until(pilot, lambda: _descriptions(app) == ["New", "Quit", "palette"], 10, "pane c's keys")
        footer = app.query_one(KeyFooter)
        # THEN the keys read as Textual's compact footer writes them: key, description, a space between
        assert footer.render().plain.startswith("n New q Quit ^p palette")
        # WHEN the footer's "q" is clicked THEN the app quits, as with Textual's footer
        await pilot.click(KeyFooter, offset=(footer.render().plain.index("q"), 0))
        await pilot.pause(0.2)
        assert not app.is_running
