"""Every place the app goes past Textual's documented API, in one module: a private name it calls or
overrides, or an undocumented behaviour it relies on. Each is here because it earns at least a tenth
of the pane-switch ratio to the bare app (`benchmarks/run.py --only compat_gains`; the figures are
in docs/performance.md), and says what it buys. Written against textual 8.2.8 (pinned by the
snapshot tests; a slow test runs the TUI tests on the newest 8.x); on a Textual upgrade, this module
is the one to re-read against its source.

What is left in the rest of the app is public: `Widget.BLANK` set as a class attribute (an
undocumented but unprefixed ClassVar, widgets/blank.py), handlers that run before a Textual base
class's own and `prevent_default` it (documented), and the process-wide settings of `idle_gc.py`
(Python's `gc`, not Textual)."""

from __future__ import annotations

from textual import events
from textual.geometry import Size
from textual.widgets import DataTable

# -- tables ----------------------------------------------------------------------------------------


# buys: a switch back to a table pane reuses its rendered lines, not a re-render of every visible cell
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

    def on_resize(self, event: events.Resize) -> None:
        if self.keeps_lines_at(event.size):
            event.prevent_default()  # DataTable's own (private) handler would drop every rendered line

    def notify_style_update(self) -> None:
        super(DataTable, self).notify_style_update()  # the widget's own style caches, not DataTable's line drop
        self._get_styles_to_render_cell.cache_clear()  # cell styles are cached by cell only, not focus state
        self.restyled()

    def drop_rendered_lines(self) -> None:
        """Every rendered line and row, as DataTable drops them on a restyle (its own handler of it)."""
        DataTable.notify_style_update(self)
