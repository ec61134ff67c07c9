"""Running the checks on a user's model class in a child process, so that code nobody here wrote
cannot hang the run or end it with a fake exit code.

The child (a *spawned* interpreter: no fork of a process that holds threads or OpenMP state)
builds its own `CheckContext` from the same options and streams the engine's events back. The
parent enforces a time budget per check. A check whose process died (`os._exit`, a segfault, the
OOM killer) or ran past its budget becomes an `error` result naming the check and what it was
doing; the parent then starts a new child that continues with the remaining checks (their
dependencies see the error and skip, as usual). `sys.exit()` never gets this far: the engine
catches `SystemExit` in-process.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
import time

from ..errors import MiniGPTError
from .control import Listener
from .options import CheckOptions
from .registry import catalog
from .result import CheckResult, Report, Status

DEFAULT_CHECK_TIMEOUT_S = 600.0  # generous: the overfit on a large user model on a slow CPU
POLL_S = 0.2
STARTUP_S = 180.0  # a spawned interpreter importing torch on a loaded machine, before any check


def _child(options: CheckOptions, only, skip, done, events) -> None:  # runs in the spawned process
    from .context import CheckContext
    from .engine import run_checks

    def listener(kind: str, payload: tuple) -> None:
        events.put((kind, payload))

    try:
        report = run_checks(CheckContext(options), only=only, skip=skip, listener=listener, done=done)
        events.put(("report", report))
    except BaseException as exc:  # anything that escapes the engine: say it, then exit
        events.put(("crashed", f"{type(exc).__name__}: {exc}"))


def run_checks_isolated(
    options: CheckOptions,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
    timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
) -> Report:
    """`run_checks` in a child process, with a time budget per check (see the module docstring)."""
    listener = listener or (lambda kind, payload: None)
    cancel = cancel or threading.Event()
    info = catalog()
    done: list[CheckResult] = []
    started_at = time.time()
    ctx = mp.get_context("spawn")
    while True:
        events = ctx.Queue()
        proc = ctx.Process(target=_child, args=(options, only, skip, list(done), events), daemon=True)
        proc.start()
        current: tuple[str, int, int] | None = None
        deadline = time.monotonic() + max(timeout_s, STARTUP_S)  # the child imports torch first
        failure: str | None = None
        try:
            while True:
                if cancel.is_set():
                    proc.kill()
                    return Report(results=done, fault=options.fault, started_at=started_at, cancelled=True)
                try:
                    kind, payload = events.get(timeout=POLL_S)
                except queue.Empty:
                    if not proc.is_alive():
                        failure = f"the check process exited with code {proc.exitcode}"
                        break
                    if time.monotonic() > deadline:
                        waited = timeout_s if current is not None else max(timeout_s, STARTUP_S)
                        failure = f"no result after {waited:g} s (a forward pass that never returns?)"
                        break
                    continue
                if kind == "report":
                    report: Report = payload
                    report.started_at = started_at
                    return report
                if kind == "crashed":
                    failure = f"the check process failed: {payload}"
                    break
                if kind == "started":
                    current, deadline = payload, time.monotonic() + timeout_s
                elif kind == "finished":
                    result = payload[0]
                    if not any(r.id == result.id for r in done):
                        done.append(result)
                    current = None
                listener(kind, payload)
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
        if current is None:  # died between checks (importing the model file, say): nothing to blame
            raise MiniGPTError(f"the check process ended outside any check: {failure}")
        cid, index, total = current
        check = info[cid]
        result = CheckResult(
            cid,
            check.stage,
            Status.ERROR,
            f"{failure} during {cid} ({check.title})",
            causes=[
                "os._exit()/a crash in the model's code or a library it calls"
                if "exited" in (failure or "")
                else "the model's forward (or code it calls) did not return in time",
            ],
            fixes=["run your model's forward on one batch by hand", "--check-timeout SECONDS to allow more time"],
        )
        done.append(result)
        listener("finished", (result, index, total))
