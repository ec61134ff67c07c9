"""A DataTable that keeps its rendered lines when its tab is shown again or focus comes back.

A pane switch to a table re-rendered every visible cell (for the checks and gradients tables,
the costliest part of the switch), for two reasons that change nothing drawn:
Textual sends a Resize each time a tab is shown, same size or not, and DataTable drops its
caches on every Resize; and leaving the pane blurs the table, which restyles it, and DataTable
drops its caches on every restyle. Its cache keys already hold the size and the focus state
(`_pseudo_class_state`), so `SteadyTable` keeps them unless the size or, for the state the
table is in, the styles it draws with changed (a theme switch, a new stylesheet)."""

from __future__ import annotations

from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import PseudoClasses

from minigpt_tui.textual_compat import LineKeepingTable


class SteadyTable(LineKeepingTable):
    """DataTable whose same-size Resize and focus-only restyle keep the rendered lines."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._sized_for: Size | None = None
        self._looks: dict[PseudoClasses, tuple[Style, ...]] = {}  # per focus/hover state: the styles drawn with
        self._restyled = False  # restyled since the last line drawn

    def keeps_lines_at(self, size: Size) -> bool:
        same = size == self._sized_for
        self._sized_for = size
        return same

    def restyled(self) -> None:
        # the styles may still be settling (its component styles follow its own), so they are
        # compared when the next line is drawn, or once the screen has refreshed, whichever comes
        # first: a table blurred as its pane is left draws nothing until the pane is shown again,
        # and comparing then would add to that switch's first frame
        self._restyled = True
        self.refresh()
        self.call_after_refresh(self._settle)

    def _settle(self) -> None:
        if self._restyled:
            self._restyled = False
            self._keep_or_drop_lines()

    def render_line(self, y: int) -> Strip:
        self._settle()
        return super().render_line(y)

    def _keep_or_drop_lines(self) -> None:
        """Keep the rendered lines when the table looks, in its present state, as it did the last time it
        was in that state; else drop them all (a theme switch, a new stylesheet)."""
        state = self.get_pseudo_class_state()
        try:
            look = (self.rich_style, *(self.get_component_rich_style(name) for name in sorted(self.COMPONENT_CLASSES)))
        except KeyError:  # the component styles are not in place yet (mounting)
            self._looks.clear()
            self.drop_rendered_lines()
            return
        if self._looks.get(state) == look:
            return
        if state in self._looks:  # this state's styles changed: every cached line may be stale
            self._looks.clear()
        self._looks[state] = look
        self.drop_rendered_lines()
