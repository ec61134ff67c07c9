"""The command palette (ctrl+p): the app's commands, read from the app through its one method
for them (`palette_commands`), matched as the user types, in a palette that holds up under a burst
of keys (a held key, a paste)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from textual.binding import Binding
from textual.command import CommandList, CommandPalette, DiscoveryHit, Hit, Hits, Provider


class _Commands(Protocol):
    def palette_commands(self) -> list[tuple[str, str, Callable[[], object]]]: ...


class MiniGPTCommands(Provider):
    """ctrl+p: run all/one check, start/stop training, inject/clear a fault, export the report."""

    async def startup(self) -> None:
        app = cast(_Commands, self.app)
        self._commands = app.palette_commands()  # the catalog and fault list are torch-free

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, callback in self._commands:
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), callback, help=help_text)

    async def discover(self) -> Hits:
        for title, help_text, callback in self._commands:
            yield DiscoveryHit(title, callback, help=help_text)


class SteadyCommandPalette(CommandPalette):
    """Textual's command palette, safe under a burst of keys: page up/down wait until the list of
    commands is laid out (before that it has no lines to page, and Textual's paging raises)."""

    BINDINGS = [
        Binding("pagedown", "page_commands(1)", "Next page", show=False),
        Binding("pageup", "page_commands(-1)", "Previous page", show=False),
    ]

    def action_page_commands(self, direction: int) -> None:
        commands = self.query_one(CommandList)
        if not (
            commands.option_count and commands.highlighted is not None and commands.scrollable_content_region.height
        ):
            return
        try:
            commands.action_page_down() if direction > 0 else commands.action_page_up()
        except KeyError:  # the list maps its options to lines only as it draws them: nothing to page yet
            return
