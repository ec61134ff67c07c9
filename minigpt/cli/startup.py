"""Ctrl-C while `minigpt` starts: held back until the imports are done, then exit 130.

Python raises KeyboardInterrupt wherever the main thread is when SIGINT arrives. Inside an import
that is a traceback; inside torch's or numpy's C++ start-up it is worse (an abort with
`pybind11::error_already_set`, a RecursionError, or an interrupt swallowed by a finaliser and a run
that goes on to the end). So the CLI's entry takes SIGINT first, before any slow import, notes it,
imports what the command needs, and only then either stops ("interrupted", 130) or gives SIGINT
back to Python's handler for the command itself (which saves and stops cleanly).

Only the standard library is imported here: this module is what runs before everything else.
"""

from __future__ import annotations

import contextlib
import importlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

STARTED = time.perf_counter()  # the command's start, before its slow imports: its "done in" counts from here

# the modules each command's run imports that start C++ (torch, numpy) or are slow: imported while
# SIGINT is held back (the rest of what a run imports is plain Python, where an interrupt is clean)
PRELOAD = {
    "prepare": ("numpy", "torch"),
    "train": ("numpy", "torch", "minigpt.train.trainer"),
    "sample": ("numpy", "torch", "minigpt.model.checkpoint"),
    "check": ("numpy", "torch", "minigpt.checks"),
    "import": ("numpy", "torch"),
}


@contextlib.contextmanager
def sigint_held() -> Iterator[list[int]]:
    """Hold SIGINT back for the block; the list it yields holds the signals that arrived. A SIGINT
    that is ignored (`nohup`, a script's background job) stays ignored; off the main thread (where
    Python cannot set handlers) nothing is held."""
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield caught
        return
    signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)


def preload(command: str | None, status: TextIO | None = None) -> None:
    """Import the slow, C++-backed modules `command` will need (call inside `sigint_held`). On a
    terminal (`status`, stderr by default) a line says so while they load, and is wiped after: a
    first run spends seconds here before the command draws anything."""
    names = PRELOAD.get(command or "", ())
    stream = sys.stderr if status is None else status
    shown = bool(names) and stream is not None and stream.isatty()
    if shown:
        stream.write("loading torch…")
        stream.flush()
    try:
        for name in names:
            with contextlib.suppress(ImportError):  # a missing optional one: the command says so itself
                importlib.import_module(name)
    finally:
        if shown:
            stream.write("\r\x1b[K")  # the line wiped: the command's own output starts there
            stream.flush()
