"""What the engine hands each check besides the context: cancellation and progress, passed in."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minigpt.checks.result import CheckResult


# what a run tells its listener, in this order for each check: Started, any Progress, Finished


@dataclass(frozen=True)
class Started:
    check_id: str
    index: int  # in the run's pipeline order
    total: int


@dataclass(frozen=True)
class Progress:
    check_id: str
    fraction: float  # of the check's own work, 0..1


@dataclass(frozen=True)
class Finished:
    result: CheckResult
    index: int
    total: int


CheckEvent = Started | Progress | Finished
Listener = Callable[[CheckEvent], None]


class Cancelled(Exception):
    """The run was cancelled; the engine stops at the check that raised it."""


def _ignore(event: CheckEvent) -> None:
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
        self.listener(Progress(self.check_id, fraction))
