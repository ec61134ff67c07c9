"""The `?` help: every key the app and its panes bind is listed, under the pane it works in."""

from __future__ import annotations

import re

from textual.binding import Binding
from textual.widgets import Input, TabbedContent

from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.workbench import PANES
from tests.waiting import wait_until

from .conftest import rendered

EVERYWHERE = "everywhere"


def help_keys(screen: HelpScreen) -> dict[str, set[str]]:
    """The keys the help shows, by section title (a row's first cell, split at its spaces)."""
    titles = {EVERYWHERE} | {f"{n} {title}" for n, (_, title) in enumerate(PANES, start=1)}
    sections: dict[str, set[str]] = {}
    current = None
    for line in rendered(screen.query_one("#help-keys")).splitlines():
        if line.strip() in titles:
            current = sections.setdefault(line.strip(), set())
        elif current is not None and line.startswith("  ") and line.strip():
            first_cell = re.split(r"\s{2,}", line.strip())[0]
            if line[: len(line) - len(line.lstrip())] == "  ":  # a wrapped line starts further in
                current.update(first_cell.split())
    return sections


def declared(app, widgets) -> set[str]:
    """The keys the classes of `widgets` declare, this app's own classes only (not Textual's)."""
    keys = set()
    for widget in widgets:
        for cls in type(widget).__mro__:
            if cls.__module__.startswith("minigpt_tui.") and "BINDINGS" in vars(cls):
                keys |= {app.get_key_display(b) for b in Binding.make_bindings(vars(cls)["BINDINGS"])}
    return keys


async def test_help_lists_every_key_the_app_and_each_pane_bind(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: len(app.panes) == len(PANES), what="the panes")
        await wait_until(pilot, lambda: all(p.is_mounted for p in app.panes.values()), what="the panes mounted")
        # every key the footer shows, pane by pane, with the focus on each place Tab reaches
        in_footer: dict[str, set[str]] = {}
        for n, (pane_id, title) in enumerate(PANES, start=1):
            if isinstance(app.focused, Input):
                await pilot.press("escape")  # a digit typed into a field stays there
            await pilot.press(str(n))
            await wait_until(pilot, lambda pane_id=pane_id: app.query_one(TabbedContent).active == pane_id)
            pane = app.panes[pane_id]
            for widget in [pane, *pane.query("*")]:
                if widget.focusable:
                    widget.focus()
                    await pilot.pause()
                    shown = app.screen.active_bindings.values()
                    in_footer.setdefault(f"{n} {title}", set()).update(
                        app.get_key_display(b.binding) for b in shown if b.binding.show
                    )
        if isinstance(app.focused, Input):
            await pilot.press("escape")
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="the help")
        listed = help_keys(app.screen)
        assert declared(app, [app]) <= listed[EVERYWHERE]
        for n, (pane_id, title) in enumerate(PANES, start=1):
            pane = app.panes[pane_id]
            section = f"{n} {title}"
            missing = declared(app, [pane, *pane.query("*")]) - listed.get(section, set())
            assert not missing, f"{section}: {missing} not in the help"
            unlisted = in_footer.get(section, set()) - listed.get(section, set()) - listed[EVERYWHERE]
            assert not unlisted, f"{section}: the footer shows {unlisted}, the help does not"
