"""The command palette (ctrl+p): the app's commands, read from the app through its one method
for them (`palette_commands`), matched as the user types."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, cast

from textual.command import DiscoveryHit, Hit, Hits, Provider


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
