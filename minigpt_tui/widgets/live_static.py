"""A Static whose updates skip the screen's layout pass when the widget's size cannot change.

`Static.update` lays the whole screen out again on every call (costly: docs/performance.md), and the
panes update their lines from followers and on every show: a pane switch paid one or two extra
layouts that way. `LiveStatic.update` measures the new content at the widget's current width
first; when it takes as many lines as the widget has and the width does not follow the content,
only the widget is redrawn. Anything else (first draw, hidden, a line more or less, `width:
auto` on it or a container) lays out as Textual would."""

from __future__ import annotations

from textual.dom import DOMNode
from textual.visual import VisualType
from textual.widgets import Static


class LiveStatic(Static):
    """`update(content)` without a layout pass when the new content fills the same size."""

    def update(self, content: VisualType = "", *, layout: bool | None = None) -> None:
        super().update(content, layout=bool(layout))
        if layout is None and not self.fits_as_is():
            self.refresh(layout=True)

    def fits_as_is(self) -> bool:
        """True when the content shown takes exactly the widget's current size, so a layout would change nothing."""
        size = self.size  # (0, 0) while not on screen: the next layout sizes it anyway
        if not self.is_mounted or size.width <= 0 or size.height <= 0:
            return False
        node: DOMNode | None = self
        while node is not None and node is not self.screen:  # a width that follows the content, here or above
            width = node.styles.width
            if width is not None and width.is_auto:
                return False
            node = node.parent
        styles = self.styles
        if styles.height is not None and not styles.height.is_auto:  # a fixed height: content cannot move it
            return True
        # measured as Textual measures it before a layout (`get_height` is typed for a RulesMap)
        return self.visual.get_height(styles, size.width) == size.height  # type: ignore[arg-type]
