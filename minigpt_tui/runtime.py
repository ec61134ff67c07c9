"""What the app changes in its own process while it runs, and gives back at exit: the GIL's switch
interval and the pool its thread workers run on. Python's public API, not Textual's."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor

# Python's default is 5 ms: Textual's writer thread, which sends each frame, waited that long for the
# GIL behind the UI thread's work after a pane switch (its restyles). Process-wide (torch's threads
# in the checks' worker see it too), so it is set while the app runs and given back after; what it
# buys is in docs/performance.md.
SWITCH_INTERVAL_S = 0.001

# Textual runs every thread worker on the event loop's default executor, which Python sizes by the
# CPU count (min(32, CPUs + 4): 6 threads on 2 cores). Three panes hold one of those threads for as
# long as the app runs (the Device pane's sampler, the Gradients and Loss followers), so three slow
# jobs (a check run beside a training run, a torch import or a generation on a loaded machine) took
# the rest, and every other worker queued behind them: the one a key waits for too (`s` reads the
# run's settings on one before it asks). The app's loop gets a pool that starts a thread whenever
# none is idle, up to far more than the workers that can be alive at once (a dozen groups, each one
# job at a time, and a cancelled job finishing), so a worker never waits for another's thread.
WORKER_THREADS_MAX = 64


class ProcessSettings:
    """`use_worker_pool` before any worker starts (the app's on_load), `apply` once running,
    `restore` at exit."""

    def __init__(self) -> None:
        self._switch_interval = sys.getswitchinterval()

    @staticmethod
    def use_worker_pool() -> None:
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(max_workers=WORKER_THREADS_MAX, thread_name_prefix="worker")
        )

    def apply(self) -> None:
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)

    def restore(self) -> None:
        sys.setswitchinterval(self._switch_interval)
