"""Running the checks on a user's model class in a child process, so that code nobody here wrote
cannot hang the run or end it with a fake exit code.

The child is a fresh interpreter (`python -c ...`, not `multiprocessing`: no fork of a process that
holds threads or OpenMP state, no re-import of the caller's `__main__`, and it works under a TUI
that has replaced `sys.stdout`/`sys.stderr`), with the checks' torch thread policy in its environment
(`minigpt.threads.child_env`). It builds its own `CheckContext` from the same options and streams
the engine's events back over a private pipe as authenticated JSON frames, never pickles
(`sandbox_wire`); the parent holds them against the plan of the run (`_Plan`) and assembles the
report itself, so a model that writes on the pipe is named, not believed (the model's own prints go
to /dev/null, its stderr into a bounded tail quoted on a crash). The parent enforces a time budget
per check. A check whose process died (`os._exit`, a segfault, the OOM killer's SIGKILL: each named
as what it is) or ran past its budget becomes an `error` result naming the check and what it was
doing (a death is noticed from the process itself, not from the pipe's EOF: a grandchild the model
started may hold the pipe open); the parent then starts a new child that continues with the
remaining checks (their dependencies see the error and skip, as usual). `sys.exit()` never gets this
far: the engine catches `SystemExit` in-process.

The child runs in its own session, its first process a keeper that forks the worker running the
model's code: nothing the model starts outlives the check, however it ends (`sandbox_lifecycle`).
A child that closes its event pipe and keeps running is ended and named at once. Its stderr is read
through a pipe into a bounded buffer: a model that writes gigabytes costs the parent `STDERR_KEEP`
bytes.
"""

from __future__ import annotations

import os
import pickle
import queue
import secrets
import signal
import subprocess
import sys
import threading
import time
from typing import NamedTuple

from minigpt.checks.control import CheckEvent, Finished, Listener, Progress, Started
from minigpt.checks.options import CheckOptions
from minigpt.checks.registry import catalog, resolve_selection
from minigpt.checks.result import CheckResult, Report, Status, name_list
from minigpt.checks.sandbox_lifecycle import contain, end_child, ended_by_signals
from minigpt.checks.sandbox_wire import (
    KEY_BYTES,
    FrameReader,
    FrameWriter,
    WireError,
    ending_from_wire,
    ending_to_wire,
    event_from_wire,
    event_to_wire,
)
from minigpt.errors import MiniGPTError
from minigpt.threads import child_env

DEFAULT_CHECK_TIMEOUT_S = 600.0  # generous: the overfit on a large user model on a slow CPU
STARTUP_S = 180.0  # a fresh interpreter importing torch on a loaded machine, before any check
POLL_S = 0.2
EXIT_DRAIN_S = 1.0  # after the child exited: time for the events it wrote to arrive
EOF_GRACE_S = 5.0  # after the event pipe closed: time for a dying child to be seen dead
STDERR_KEEP = 64 * 1024  # bytes of the child's stderr kept for the message
_CHILD = "from minigpt.checks.sandbox import _child_main; _child_main()"


def _child_main() -> None:  # runs in the child: argv[1] is the fd to write events to, argv[2] the parent's PID
    key, options, only, skip, done = pickle.load(sys.stdin.buffer)  # the parent's, before any model code
    contain(parent=int(sys.argv[2]), events_fd=int(sys.argv[1]))  # returns in the worker only
    writer = FrameWriter(os.fdopen(int(sys.argv[1]), "wb", buffering=0), key)
    del key

    try:
        from minigpt.checks.context import CheckContext
        from minigpt.checks.engine import run_checks
        from minigpt.model.memory import large_allowed

        with large_allowed(options.allow_large):
            report = run_checks(
                CheckContext(options),
                only=only,
                skip=skip,
                listener=lambda event: writer.send(*event_to_wire(event)),
                done=done,
            )
        writer.send("report", ending_to_wire(report.fault_notes, report.judged, report.seconds))
    except BaseException as exc:  # anything that escapes the engine: say it, then exit
        writer.send("crashed", f"{type(exc).__name__}: {exc}")


def _read_events(fd: int, key: bytes, events: queue.Queue) -> None:
    """Frames from the child, as events the parent rebuilt from plain values (`sandbox_wire`)."""
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        reader = FrameReader(pipe, key)
        while True:
            try:
                frame = reader.next()
                if frame is None:
                    break
                kind, payload = frame
                if kind in ("started", "progress", "finished"):
                    events.put(("event", event_from_wire(kind, payload)))
                elif kind == "report":
                    events.put(("report", ending_from_wire(payload)))
                elif kind == "crashed":
                    events.put(("crashed", str(payload)[:2000]))
                else:
                    raise WireError(f"a frame of unknown kind {kind[:20]!r} on the check pipe")
            except WireError as exc:
                events.put(("forged", str(exc)))
                break
    events.put(("eof", None))


class _StderrTail:
    """Reads a pipe to its end on a daemon thread, keeping only its last `keep` bytes."""

    def __init__(self, fd: int, keep: int = STDERR_KEEP):
        self._keep = keep
        self._data = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._read, args=(fd,), daemon=True).start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                with self._lock:
                    self._data += chunk
                    if len(self._data) > 2 * self._keep:
                        del self._data[: -self._keep]

    def text(self, limit: int = 300) -> str:
        time.sleep(0.05)  # the reader's last chunk after the child died
        with self._lock:
            data = bytes(self._data[-self._keep :])
        return data.decode("utf-8", "replace").strip()[-limit:]


class _Failure(NamedTuple):
    summary: str  # what happened to the child: "the check process exited with code 0"
    cause: str  # the likely reason, for the result's causes


def _death(code: int) -> _Failure:
    """What a child's exit status says about how it ended."""
    if code >= 0:
        return _Failure(
            f"the check process exited with code {code}",
            "os._exit() or a crash in the model's code or a library it calls",
        )
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    if -code == signal.SIGKILL:
        cause = "SIGKILL: often the kernel's out-of-memory killer (check `dmesg`), or a `kill -9`"
    elif -code in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGABRT):
        cause = f"{name}: a crash in native code (an extension the model uses, or torch itself)"
    else:
        cause = f"{name} sent by another process or a user"
    return _Failure(f"the check process was killed by {name}", cause)


class _Plan:
    """The events the engine sends for this selection, to hold a child's events against: each planned
    check started in pipeline order and finished once under its own id and stage, a check skipped on
    request or behind a dependency that did not pass reported as skipped, the report after the last.
    A child whose events break this was not (only) the engine talking: `wrong` says what it sent."""

    def __init__(self, only: list[str] | None, skip: list[str] | None):
        self.only = list(only) if only else None
        self.skip = list(skip) if skip else None
        self.ids, self._skipped = resolve_selection(only, skip)
        self._info = catalog()

    def ordered(self, done: list[CheckResult]) -> list[CheckResult]:
        by_id = {r.id: r for r in done}
        return [by_id[cid] for cid in self.ids if cid in by_id]

    def _blocked_by(self, cid: str, finished: dict[str, CheckResult]) -> list[str]:
        return [
            d
            for d in self._info[cid].depends
            if d in finished and d not in self._skipped and finished[d].status.blocks_dependents
        ]

    def wrong(
        self, kind: str, payload: object, current: tuple[str, int, int] | None, done: list[CheckResult]
    ) -> str | None:
        finished = {r.id: r for r in done}
        if kind == "report":
            missing = [cid for cid in self.ids if cid not in finished]
            return f"its report while {name_list(missing)} had not run" if missing else None
        if isinstance(payload, Started):
            following = next((cid for cid in self.ids if cid not in finished), None)
            if (
                current is not None
                or payload.check_id != following
                or payload.total != len(self.ids)
                or not 0 <= payload.index < len(self.ids)
                or self.ids[payload.index] != payload.check_id
            ):
                return f"a start of {payload.check_id[:60]!r} where the plan has {following or 'no further check'}"
        elif isinstance(payload, Progress):
            if current is None or payload.check_id != current[0]:
                return f"progress of {payload.check_id[:60]!r}, which is not the check running"
        elif isinstance(payload, Finished):
            result = payload.result
            if current is None or result.id != current[0] or payload.index != current[1]:
                return f"a result for {result.id[:60]!r}, which is not the check running"
            if result.stage != self._info[result.id].stage:
                return f"a result for {result.id} in stage {result.stage[:40]!r}, not {self._info[result.id].stage}"
            blocked = self._blocked_by(result.id, finished)
            if (result.id in self._skipped or blocked) and result.status is not Status.SKIP:
                why = "skipped on request" if result.id in self._skipped else f"behind {', '.join(blocked)}"
                return f"{result.status.value} for {result.id}, a check {why}"
        return None


def run_checks_isolated(
    options: CheckOptions,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
    timeout_s: float = DEFAULT_CHECK_TIMEOUT_S,
) -> Report:
    """`run_checks` in a child process, with a time budget per check (see the module docstring)."""
    listener = listener or (lambda event: None)
    cancel = cancel or threading.Event()
    info = catalog()
    plan = _Plan(only, skip)
    done: list[CheckResult] = []
    started_at, t0 = time.time(), time.perf_counter()
    with ended_by_signals():
        while True:
            report, failure, current, stderr_tail = _one_child(options, plan, done, listener, cancel, timeout_s)
            if report is not None:
                report.started_at, report.seconds = started_at, time.perf_counter() - t0
                return report
            assert failure is not None
            if current is None:  # died between checks (importing the model file, say): nothing to blame
                raise MiniGPTError(
                    f"the check process ended outside any check: {failure.summary} ({failure.cause})"
                    + (f"; its last output: {stderr_tail}" if stderr_tail else "")
                )
            cid, index, total = current
            check = info[cid]
            result = CheckResult(
                cid,
                check.stage,
                Status.ERROR,
                f"{failure.summary} during {cid} ({check.title})",
                causes=[failure.cause] + ([f"its last output: {stderr_tail}"] if stderr_tail else []),
                fixes=["run your model's forward on one batch by hand", "--check-timeout SECONDS to allow more time"],
            )
            done.append(result)
            listener(Finished(result, index, total))


def _one_child(
    options: CheckOptions,
    plan: _Plan,
    done: list[CheckResult],
    listener: Listener,
    cancel: threading.Event,
    timeout_s: float,
) -> tuple[Report | None, _Failure | None, tuple[str, int, int] | None, str]:
    """One child, until its report, or until it fails: then what failed, in which check, its stderr."""
    events: queue.Queue = queue.Queue()
    read_fd, write_fd = os.pipe()
    err_read, err_write = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(write_fd), str(os.getpid())],
        stdin=subprocess.PIPE,  # the options, then kept open: the keeper's lifeline (sandbox_lifecycle)
        stdout=subprocess.DEVNULL,  # the model's prints must not reach the caller's screen
        stderr=err_write,
        pass_fds=(write_fd,),
        start_new_session=True,  # its own process group: killed whole when the check ends
        # the checks' thread policy, as in-process: torch's default threads spin-wait on a busy
        # machine (docs/models-and-tokenizers.md gives the figures)
        env=child_env("checks"),
    )
    os.close(write_fd)  # the child (and what it starts) hold the only write ends
    os.close(err_write)
    errors = _StderrTail(err_read)
    key = secrets.token_bytes(KEY_BYTES)  # signs the child's frames: see sandbox_wire
    threading.Thread(target=_read_events, args=(read_fd, key, events), daemon=True).start()
    assert proc.stdin is not None
    try:
        proc.stdin.write(pickle.dumps((key, options, plan.only, plan.skip, list(done))))
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # died at once: reported below as an exit
    current: tuple[str, int, int] | None = None
    deadline = time.monotonic() + max(timeout_s, STARTUP_S)  # the child imports torch first
    failure: _Failure | None = None
    exited_at: float | None = None
    eof_at: float | None = None
    try:
        while True:
            if cancel.is_set():
                return Report(results=done, fault=options.fault, cancelled=True), None, None, ""
            try:
                kind, payload = events.get(timeout=POLL_S)
            except queue.Empty:
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now  # dead: its last events may still be in the pipe
                if exited_at is not None and (eof_at is not None or now - exited_at > EXIT_DRAIN_S):
                    # without an EOF, something it started holds the pipe: the process is what counts
                    failure = _death(proc.returncode)
                    break
                if eof_at is not None and (now - eof_at > EOF_GRACE_S or now > deadline):
                    failure = _Failure(
                        "the check process closed its event pipe and kept running",
                        "the model's code closed a file descriptor it had not opened (os.closerange, a"
                        " daemonising helper), which cut the check off from its results",
                    )
                    break
                if now > deadline:
                    waited = timeout_s if current is not None else max(timeout_s, STARTUP_S)
                    failure = _Failure(
                        f"no result after {waited:g} s (a forward pass that never returns?)",
                        "the model's forward (or code it calls) did not return in time",
                    )
                    break
                continue
            if kind == "eof":  # it died, or closed the pipe: which one, the next polls tell
                eof_at = time.monotonic()
                continue
            if kind == "crashed":
                failure = _Failure(
                    f"the check process failed: {payload}",
                    "the model's code broke the check process itself (an exception outside any check)",
                )
                break
            wrong = payload if kind == "forged" else plan.wrong(kind, payload, current, done)
            if wrong is not None:
                failure = _Failure(
                    f"the check process sent {wrong}",
                    "the model's code wrote on the check's event pipe (file descriptor"
                    f" {write_fd}), or changed the check engine: its verdicts cannot be trusted",
                )
                break
            if kind == "report":
                fault_notes, judged, _ = payload
                report = Report(results=plan.ordered(done), fault=options.fault, only=plan.only, judged=judged)
                report.fault_notes = fault_notes
                return report, None, None, ""
            event: CheckEvent = payload  # kind == "event"
            if isinstance(event, Started):
                current, deadline = (event.check_id, event.index, event.total), time.monotonic() + timeout_s
            elif isinstance(event, Finished):
                if not any(r.id == event.result.id for r in done):
                    done.append(event.result)
                current = None
            listener(event)
    finally:
        end_child(proc)  # whatever the model's code started dies with the check
    return None, failure, current, errors.text()
