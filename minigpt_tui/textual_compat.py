"""Every place the app goes past Textual's documented API, in one module: a private name it calls or
overrides, or an undocumented behaviour it relies on. Each says what it buys; the figures that
earned the speed-ups are in docs/performance.md. Written against textual 8.2.8 (pinned by the
snapshot tests); on a Textual upgrade, this module is the one to re-read against its source.

What is left in the rest of the app is public: `Widget.BLANK` set as a class attribute (an
undocumented but unprefixed ClassVar, widgets/blank.py), and the process-wide settings of
`idle_gc.py` (Python's `gc`, not Textual)."""

from __future__ import annotations

import sys

from textual import events
from textual.geometry import Size
from textual.reactive import Reactive
from textual.screen import Screen
from textual.visual import VisualType, visualize
from textual.widget import Widget
from textual.widgets import DataTable, Static, TabbedContent, TabPane

# -- the app: a shorter GIL hand-off while it runs -----------------------------------------------

# Python's default is 5 ms: Textual's writer thread, which sends each frame, waited that long for the
# GIL behind the UI thread's work after a pane switch (its restyles). Process-wide (torch's threads
# in the checks' worker see it too), so the app sets it while it runs and gives the old value back.
SWITCH_INTERVAL_S = 0.001


def shorten_gil_switch() -> float:
    """Set the GIL switch interval for the app's run; returns the one to restore at exit."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    return previous


def restore_gil_switch(previous: float) -> None:
    sys.setswitchinterval(previous)


# -- the workbench: tabs, screen, focus ----------------------------------------------------------


class FocusFollowingTabs(TabbedContent):
    """TabbedContent that follows a focus change only while that focus still stands.

    Textual switches to the tab of a programmatically focused widget when the TabPane.Focused
    message arrives; under load that can be after a pane key moved elsewhere (and the focused
    widget was hidden), which would undo the key press. Overrides Textual's private handler
    `_on_tab_pane_focused` (there is no public hook for this message's default action)."""

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        focused = self.screen.focused
        if focused is None or event.tab_pane not in focused.ancestors_with_self:
            event.prevent_default()  # Textual calls the base class's handler too unless prevented
            event.stop()


class QuietFocusScreen(Screen):
    """A screen whose focus change does not repaint all of it.

    Textual's Screen repaints everything when its `focused` reactive changes, and a pane switch
    changes it twice (the hidden pane's widget loses the focus, the new pane's gets it): two
    full-screen frames per switch, the largest share of a switch's work (the bare app, whose focus
    stays put, has none). What the focus changes is already restyled and redrawn by Textual's own
    focus styling (`:focus`, `:focus-within`, each widget's `has_focus` watcher); redefining the
    reactive with `repaint=False` only drops the redundant repaint of the rest."""

    focused: Reactive[Widget | None] = Reactive(None, repaint=False)


def draw_blank(widget: Widget, blank: bool) -> None:
    """Draw a widget that Textual builds itself (TabbedContent's ContentSwitcher) as plain background,
    as the app's own containers are (widgets/blank.py): `BLANK` is a ClassVar that Textual reads
    as `self.BLANK`, so an instance attribute works, against its declared type."""
    widget.BLANK = blank  # type: ignore[misc]


# -- tables ----------------------------------------------------------------------------------------


def column_widths_changed(table: DataTable) -> None:
    """After a column's width was set by hand: DataTable has no public way to say its widths changed,
    and measures them again only on this private flag."""
    table._require_update_dimensions = True
    table.refresh()


class LineKeepingTable(DataTable):
    """DataTable that asks its subclass before dropping its rendered lines on a Resize or a restyle.

    Textual sends a Resize each time a tab is shown, same size or not, and DataTable's private
    `_on_resize` drops every rendered line on each; leaving a pane blurs its table, which restyles
    it, and DataTable's `notify_style_update` drops them again. Its line cache keys already hold the
    size and the focus state, so a subclass can keep them: `keeps_lines_at(size)` says whether a
    Resize keeps them, and `restyled()` is called instead of the drop (`drop_rendered_lines` is
    the drop, for when the look did change)."""

    def keeps_lines_at(self, size: Size) -> bool:
        return False

    def restyled(self) -> None:
        self.drop_rendered_lines()
        self.refresh()

    def _on_resize(self, event: events.Resize) -> None:
        if self.keeps_lines_at(event.size):
            event.prevent_default()  # DataTable's own handler would drop every rendered line

    def notify_style_update(self) -> None:
        super(DataTable, self).notify_style_update()  # the widget's own style caches, not DataTable's line drop
        self._get_styles_to_render_cell.cache_clear()  # cell styles are cached by cell only, not focus state
        self.restyled()

    def drop_rendered_lines(self) -> None:
        """Every rendered line and row, as DataTable drops them on a restyle."""
        self._clear_caches()


# -- statics -----------------------------------------------------------------------------------------


def content_height(static: Static, content: VisualType, width: int) -> int:
    """The rows `content` takes in `static` at `width`, as Textual measures it before a layout
    (Static's markup setting is private; `get_height` is typed for a RulesMap)."""
    visual = visualize(static, content, markup=static._render_markup)
    return visual.get_height(static.styles, width)  # type: ignore[arg-type]  # as Widget.get_content_height calls it
