"""Waiting for what a test asserts: the one place tests wait, so no test races the machine's load.

A fixed pause (`await pilot.pause()`, `asyncio.sleep`, `time.sleep`) followed by an assertion
passes on a quiet machine and fails on a busy one: a worker, a message or a refresh may simply not
have run yet. Tests instead wait for the condition they assert, with a deadline generous enough for
a loaded 2-core box, and fail with the last thing they saw:

- `wait_until(pilot, lambda: cond, what=...)`: until a condition holds (a Pilot test).
- `eventually(pilot, check)`: until `check()`, a function of plain asserts, passes; on the deadline
  its last AssertionError is raised, so the failure reads as the assertion itself.
- `stays(pilot, lambda: cond, seconds, what=...)`: a condition that must hold for a whole window
  ("nothing was exported"): checked all through it, not once after a sleep.
- `wait_for(lambda: cond)` / `eventually_sync(check)`: the same outside an event loop.

`tests/test_waiting_rule.py` scans the suite and fails on an assertion that follows a fixed pause
with no wait between them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

DEADLINE = 120.0  # seconds: far above a quiet run's need, so only a real hang or a bug fails


async def _tick(pilot: Any, interval: float) -> None:
    # pilot.pause lets the app process its queued messages and refresh; without a pilot (an app
    # driven by other means) the event loop still gets a turn
    if pilot is None:
        await asyncio.sleep(interval)
    else:
        await pilot.pause(interval)


async def wait_until(
    pilot: Any, condition: Callable[[], object], timeout: float = DEADLINE, what: str = "condition"
) -> None:
    """Let the app run until `condition()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await _tick(pilot, 0.05)


async def eventually(pilot: Any, check: Callable[[], object], timeout: float = DEADLINE) -> None:
    """Let the app run until `check()` raises no AssertionError; after `timeout`, raise its last one."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        await _tick(pilot, 0.05)


async def stays(pilot: Any, condition: Callable[[], object], seconds: float = 0.5, what: str = "condition") -> None:
    """Fail as soon as `condition()` is false at any point during the next `seconds` of the app's run."""
    end = time.monotonic() + seconds
    while True:
        if not condition():
            raise AssertionError(f"{what} stopped holding within {seconds}s")
        if time.monotonic() > end:
            return
        await _tick(pilot, 0.05)


def wait_for(condition: Callable[[], object], timeout: float = DEADLINE, what: str = "condition") -> None:
    """`wait_until` outside an event loop (a subprocess, a thread, a file)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def eventually_sync(check: Callable[[], object], timeout: float = DEADLINE) -> None:
    """`eventually` outside an event loop."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            check()
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)
