"""What the engine hands each check besides the context: cancellation and progress, passed in."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

# listener(kind, payload): ("started", (check_id, index, total)), ("progress", (check_id, fraction)),
# ("finished", (CheckResult, index, total))
Listener = Callable[[str, tuple], None]


class Cancelled(Exception):
    """The run was cancelled; the engine stops at the check that raised it."""


def _ignore(kind: str, payload: tuple) -> None:
    return None


@dataclass(frozen=True)
class CheckRun:
    """One check's handle on its run: `raise_if_cancelled()` in long loops, `progress(fraction)`."""

    check_id: str
    cancel: threading.Event = field(default_factory=threading.Event)
    listener: Listener = _ignore

    def raise_if_cancelled(self) -> None:
        if self.cancel.is_set():
            raise Cancelled()

    def progress(self, fraction: float) -> None:
        self.listener("progress", (self.check_id, fraction))
