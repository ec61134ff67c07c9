"""Running the check engine for the app, on a worker thread: one run at a time on the session's
shared context; a new run cancels the one in progress; the engine's events go out as the app's
messages (`ChecksStarted`, `CheckStarted`, `CheckProgressed`, `CheckFinished`, `ChecksFinished`).
A `--model` from the user's file runs in the sandbox (a child process with a time budget per
check), so a hang or `os._exit` in code nobody here wrote is an error row, never a frozen UI.
`merged_report` folds a run of a few checks into the last full report."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from functools import partial

from textual.app import App

from minigpt.checks.result import Report
from minigpt_tui.messages import CheckFinished, CheckProgressed, ChecksFinished, ChecksStarted, CheckStarted
from minigpt_tui.session import Session


class CheckRunner:
    def __init__(self, app: App, session: Callable[[], Session]) -> None:
        self.app, self.session = app, session  # the session is read per run: the demo replaces it
        self._cancel: threading.Event | None = None
        self._lock = threading.Lock()  # a cancelled run still finishing its current check goes first
        self.started_at = 0.0  # perf_counter when the newest run was asked for

    def start(self, only: list[str] | None = None) -> None:
        """Cancel a run in progress and start a new one (all checks, or `only` and their dependencies)."""
        self.cancel()
        self._cancel = cancel = threading.Event()
        self.started_at = time.perf_counter()
        self.app.run_worker(
            partial(self._work, only, cancel),
            name="checks",
            group="checks",
            exclusive=True,
            exit_on_error=False,
            thread=True,
        )

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    @property
    def running(self) -> bool:
        return any(w.group == "checks" and not w.is_finished for w in self.app.workers)

    def _work(self, only: list[str] | None, cancel: threading.Event) -> None:
        with self._lock:
            if cancel.is_set():
                return
            from minigpt.checks import resolve_selection, run_checks
            from minigpt.checks.control import CheckEvent, Finished, Progress, Started
            from minigpt.threads import apply as apply_thread_policy

            apply_thread_policy("checks")
            session = self.session()
            options = session.options
            ids, _ = resolve_selection(only, None)
            post = self.app.post_message
            post(ChecksStarted(ids, only))

            def listener(event: CheckEvent) -> None:
                if cancel.is_set():
                    return
                if isinstance(event, Started):
                    post(CheckStarted(event.check_id, event.index, event.total))
                elif isinstance(event, Progress):
                    post(CheckProgressed(event.check_id, event.fraction))
                elif isinstance(event, Finished):
                    post(CheckFinished(event.result, event.index, event.total))

            if options.model_spec:
                from minigpt.checks.sandbox import run_checks_isolated

                report = run_checks_isolated(options, only=only, listener=listener, cancel=cancel)
            else:
                report = run_checks(session.context, only=only, listener=listener, cancel=cancel)
            if not cancel.is_set():
                post(ChecksFinished(report))


def merged_report(previous: Report | None, report: Report) -> Report:
    """A run of a few checks (`report.only`) folded into the last full report, the newer results in
    their places; a full run, or one after a cancelled report, stands as it is."""
    if not report.only or previous is None or previous.cancelled:
        return report
    fresh = report.by_id()
    merged = [fresh.pop(r.id, r) for r in previous.results] + list(fresh.values())
    return dataclasses.replace(
        previous, results=merged, fault=report.fault, fault_notes=report.fault_notes, judged=report.judged
    )
