"""A key whose answer needs a worker (`s` reads the run's settings on one) is answered while other
workers are slow: a check run beside a training run, a torch import on a loaded machine. Textual
runs thread workers on the event loop's default executor; Python sizes that pool by the CPU count
(6 threads on 2 cores), and three panes hold a thread each for as long as the app runs, so `s`
waited for a slow job to end before its question could appear (issue: keys lost under load)."""

from __future__ import annotations

import os
import threading

from minigpt_tui.panes.loss import LossPane
from minigpt_tui.screens.confirm import ConfirmScreen
from tests.waiting import DEADLINE, wait_until

from .conftest import SIZE, wait_for_report

PYTHON_DEFAULT_POOL = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default max_workers


async def test_s_asks_its_question_while_slow_workers_hold_as_many_threads_as_pythons_pool(workspace, make_app):
    app = make_app(workspace)
    release = threading.Event()
    running: list[int] = []

    def slow_job(i: int) -> None:  # a job that takes long on a loaded machine: it runs until let go
        running.append(i)
        release.wait(10 * DEADLINE)  # let go in `finally`, whatever the test's outcome

    async with app.run_test(size=SIZE) as pilot:
        # GIVEN the Loss pane, its follower running, after the checks
        await wait_for_report(pilot, app)
        await pilot.press("6")
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: app.focused is pane, what="the Loss pane to take the focus")
        await wait_until(pilot, lambda: pane.points_count > 0, what="the follower's first snapshot")
        try:
            # AND as many slow jobs running in other groups as Python's default pool has threads
            slow = [
                app.run_worker(
                    lambda i=i: slow_job(i), thread=True, group=f"slow-{i}", name="slow job", exit_on_error=False
                )
                for i in range(PYTHON_DEFAULT_POOL)
            ]
            await wait_until(pilot, lambda: all(w.is_running for w in slow), what="the slow jobs to be started")
            # WHEN s asks to start a run
            await pilot.press("s")
            # THEN its question appears while the slow jobs still run, each on a thread of its own
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the start question")
            await wait_until(
                pilot, lambda: len(running) == PYTHON_DEFAULT_POOL, what="every slow job to have a thread of its own"
            )
            assert not release.is_set()  # none of them had to end first
            await pilot.press("n")
        finally:
            release.set()
