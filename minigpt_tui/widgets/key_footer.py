"""The footer of keys: one widget drawing one line, redrawn only when the keys it shows change.

Textual's Footer is a container of one widget per key, recomposed on every change of the screen's
bindings (each focus change signals). On a pane switch that meant unmounting and mounting a widget
per key, restyling them and laying the screen out again: about half of the UI thread's work per
switch (docs/performance.md).
This draws the same keys, in the same colours (the theme's `$footer-*` variables), as one line of
text; a click on a key presses it, as on Textual's footer."""

from __future__ import annotations

from typing import NamedTuple

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget


class ShownKey(NamedTuple):
    key: str  # the key `simulate_key` presses
    display: str  # as the footer shows it ("^p", "?")
    description: str
    enabled: bool


def shown_keys(screen: Screen, command_palette: bool = False) -> tuple[ShownKey, ...]:
    """What Textual's Footer draws from the screen's active bindings: those with `show`, one per
    action (the first), and the command palette's key last when asked for."""
    app = screen.app
    keys: list[ShownKey] = []
    actions: set[str] = set()
    bindings = screen.active_bindings
    for _, binding, enabled, _tooltip in bindings.values():
        if binding.show and binding.action not in actions:
            actions.add(binding.action)
            keys.append(_shown(app, binding, enabled))
    if command_palette and app.ENABLE_COMMAND_PALETTE and app.COMMAND_PALETTE_BINDING in bindings:
        _, binding, enabled, _ = bindings[app.COMMAND_PALETTE_BINDING]
        keys.append(_shown(app, binding, enabled))
    return tuple(keys)


def _shown(app, binding: Binding, enabled: bool) -> ShownKey:
    return ShownKey(binding.key, app.get_key_display(binding), binding.description, enabled)


_ENABLED, _DISABLED = Style(), Style(dim=True)


class KeyFooter(Widget, can_focus=False):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"key-footer--key", "key-footer--description"}
    DEFAULT_CSS = """
    KeyFooter {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        text-wrap: nowrap;
        text-overflow: clip;
        & > .key-footer--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        & > .key-footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """

    def __init__(self, *, compact: bool = True, show_command_palette: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.compact = compact  # one space between a key and its description, one between keys
        self.show_command_palette = show_command_palette
        self.keys: tuple[ShownKey, ...] = ()
        self._spans: list[tuple[int, int, ShownKey]] = []  # where each key sits on the line
        self._settling = False

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)  # the keys as they are now, not only at the next change

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        # a burst of signals (blur, focus, ...) is looked at once, when the messages before it are done:
        # in the frame of the change that caused it (a frame of its own would span the screen)
        if not self._settling:
            self._settling = True
            self.call_later(self._bindings_settled, screen)

    def _bindings_settled(self, screen: Screen) -> None:
        self._settling = False
        if not screen.app.app_focus or not self.is_attached or screen is not self.screen:
            return  # as Textual's footer: the keys stay as they are while the app has no focus
        keys = shown_keys(screen, self.show_command_palette)
        if keys != self.keys:
            self.keys = keys
            self.refresh()

    def render(self) -> Text:
        key_style = self.get_component_rich_style("key-footer--key")
        description_style = self.get_component_rich_style("key-footer--description")
        pad = "" if self.compact else " "
        text = Text(no_wrap=True, overflow="crop", end="")
        spans = []
        for shown in self.keys:
            start = len(text)
            dim = _ENABLED if shown.enabled else _DISABLED
            text.append(f"{pad}{shown.display}{pad}", key_style + dim)
            if shown.description:
                text.append(f" {shown.description}{pad}", description_style + dim)
            spans.append((start, len(text), shown))
            text.append(" ")
        self._spans = spans
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, shown in self._spans:
            if start <= event.x < end:
                event.stop()
                if shown.enabled:
                    self.app.simulate_key(shown.key)
                else:
                    self.app.bell()
                return
