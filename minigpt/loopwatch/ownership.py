"""A watch belongs to the process that opened it: that process's exit closes it, and a forked child (a DataLoader
worker, `os.fork()` in the loop) forgets it at the fork, so the child never writes, flushes, closes or releases the
parent's run folder (`Watch._forget_in_child`)."""

from __future__ import annotations

import atexit
import os
import weakref
from typing import Protocol


class Owned(Protocol):
    pid: int  # the process that opened it: only it writes, closes or releases it

    def close(self) -> None: ...

    def _forget_in_child(self) -> None: ...


_OPEN: weakref.WeakSet[Owned] = weakref.WeakSet()  # this process's open watches


def adopt(watch: Owned) -> None:
    """Close `watch` when this process exits (if it still exists then); forget it in a forked child."""
    atexit.register(_at_exit, weakref.ref(watch))
    _OPEN.add(watch)


def _at_exit(ref: weakref.ref) -> None:
    watch = ref()
    if watch is not None:
        watch.close()


def _forget_watches_in_child() -> None:
    for watch in list(_OPEN):
        if watch.pid != os.getpid():
            watch._forget_in_child()


os.register_at_fork(after_in_child=_forget_watches_in_child)
