"""The footer of keys, rebuilt only when the keys it shows change.

Textual's Footer rebuilds its key widgets on every change of the screen's bindings: four times per
pane switch (each focus change signals), each time mounting and styling a widget per key. That
work on the UI thread delayed the switch's frame; most switches leave the keys as they were."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer


def shown_keys(screen: Screen) -> tuple[tuple[Binding, bool, str], ...]:
    """What Footer.compose draws from: the bindings it shows, whether enabled, their tooltips."""
    return tuple(
        (binding, enabled, tooltip) for _, binding, enabled, tooltip in screen.active_bindings.values() if binding.show
    )


class KeyFooter(Footer):
    _shown: tuple[tuple[Binding, bool, str], ...] | None = None
    _settling = False

    def bindings_changed(self, screen: Screen) -> None:
        # a burst of signals (blur, focus, ...) is looked at once, after the refresh it came in
        if not self._settling:
            self._settling = True
            self.call_after_refresh(self._bindings_settled, screen)

    def _bindings_settled(self, screen: Screen) -> None:
        self._settling = False
        if not screen.app.app_focus:
            self._shown = None  # Footer leaves the keys as they are: look again on the next change
            super().bindings_changed(screen)
            return
        shown = shown_keys(screen)
        if shown != self._shown:
            self._shown = shown
            super().bindings_changed(screen)  # recomposes after the next refresh:
            self.refresh()  # ask for one, or the keys wait for something else to repaint
