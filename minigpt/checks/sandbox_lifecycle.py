"""Nothing a sandboxed model starts outlives its check, however the check ends: its end, a
timeout, SIGTERM (`timeout`), SIGHUP (a closed terminal), Ctrl-C, even a SIGKILL of the parent.

A process group is not enough: a model's code may double-fork and call setsid (a daemonising
helper), and then neither the group nor the parent links lead to what it left. So on Linux the
child's first process, the keeper (torch-free, single-threaded, never running the model's code),
makes itself a child subreaper (PR_SET_CHILD_SUBREAPER) and forks the worker that runs the model:
every orphan below the worker is re-parented to the keeper instead of init, so the parent links in
/proc always lead from the keeper to all of it (`kill_tree`). The keeper ends that tree when the
worker exits, when it is signalled, and when the parent dies, however it dies: its stdin is a pipe
whose only write end the parent holds, so EOF there is the parent's death (PR_SET_PDEATHSIG on the
keeper too, in case a process the parent forked inherited that end). The worker has
PR_SET_PDEATHSIG=SIGKILL: the keeper killed, the model dies with it. A cgroup would do all this but
needs privileges a user lacks; a scan of /proc without a subreaper misses a grandchild orphaned
between two scans. Elsewhere (macOS) the process group is what is killed.

The parent ends a child with `end_child`; `ended_by_signals` makes SIGTERM and SIGHUP unwind the
run as Ctrl-C does (so `end_child` runs), then ends the process by that signal.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import NoReturn

KEEPER_POLL_S = 0.1
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36  # <linux/prctl.h>
_ENDING = (signal.SIGTERM, signal.SIGHUP)  # a `timeout`, a closed terminal; SIGINT is KeyboardInterrupt


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0


def contain(parent: int, events_fd: int) -> None:
    """Split the child into the keeper (which never returns from here) and the worker (which does)."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    keeper = os.getpid()
    worker = os.fork()  # safe: only the standard library and minigpt's torch-free metadata are loaded
    if worker == 0:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != keeper:  # the keeper died before the line above: so does the worker
            os._exit(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # the lifeline is the keeper's; the model reads nothing
        os.close(devnull)
        return
    os.close(events_fd)  # the worker and what it starts hold it: its EOF means they closed or died
    _keep(worker, parent)


def _keep(worker: int, parent: int) -> NoReturn:
    """The keeper's loop: reap what is re-parented to it; end the tree when the worker exits (then
    exit as it did), when the keeper is signalled, or when the parent is gone."""
    ended: list[int] = []
    for sig in (*_ENDING, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: ended.append(signum))
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the line above
        ended.append(signal.SIGTERM)
    status: int | None = None
    while status is None and not ended:
        readable, _, _ = select.select([0], [], [], KEEPER_POLL_S)
        if readable and not os.read(0, 4096):  # EOF: the parent is gone, or done with this child
            break
        status = _reap(worker)
    kill_tree(os.getpid())
    deadline = time.monotonic() + 2.0  # reap what was killed: no zombie is handed on to init
    while descendants(os.getpid()) and time.monotonic() < deadline:
        _reap(worker)
        time.sleep(0.01)
    if status is None:  # not the worker's exit: its process group too (all there is beyond Linux)
        os.killpg(0, signal.SIGKILL)
    _exit_as(status or 0)


def _reap(worker: int) -> int | None:
    """Collect exited children (the worker, orphans re-parented here); the worker's wait status."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == worker:
            status = st


def _exit_as(status: int) -> NoReturn:
    """End the keeper as its worker ended, so the parent reads the worker's code or signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the worker's crash needs no second core file
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal that does not end a process: as a shell would report it
    os._exit(os.waitstatus_to_exitcode(status))


def descendants(root: int) -> set[int]:
    """Every process below `root`, from the parent links in /proc (Linux; elsewhere none)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat", "rb") as fh:
                        stat = fh.read()
                except OSError:  # ended meanwhile
                    continue
                ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])  # after the name, which may hold spaces
                children.setdefault(ppid, []).append(int(name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), ()):
            if pid not in found:
                found.add(pid)
                todo.append(pid)
    return found


def kill_tree(root: int) -> None:
    """SIGKILL every process below `root`. They are stopped first, scan after scan until no new one
    shows up: a stopped process cannot fork, so none is born between the last scan and the kill."""
    stopped: set[int] = set()
    while fresh := descendants(root) - stopped:
        for pid in fresh:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= fresh
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def end_child(proc: subprocess.Popen) -> None:
    """End the child and everything the model started: the keeper's tree (Linux), then the keeper,
    told by its lifeline's EOF (it reaps what was killed), then its process group."""
    with _signals_held():
        kill_tree(proc.pid)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):  # BrokenPipeError: the keeper is already gone
                proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
        proc.wait()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP for the few milliseconds of the kill: a second Ctrl-C must not
    cut it short. They are delivered (and acted on) after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, *_ENDING})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Ended(BaseException):
    """SIGTERM or SIGHUP arrived while checks ran in a child: unwinds through the child's end."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def ended_by_signals() -> Iterator[None]:
    """Until the block ends, SIGTERM and SIGHUP (a `timeout`, a closed terminal) unwind it as Ctrl-C
    does, so the child is ended; then the process ends by that signal, as it would have (the shell
    reads 128 + its number). An ignored signal (`nohup`) or a caller's handler is left alone; off
    the main thread (the UI's worker) Python cannot set handlers, and the keeper sees the exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def end(signum: int, frame: object) -> None:
        raise _Ended(signum)

    previous = {sig: signal.signal(sig, end) for sig in _ENDING if signal.getsignal(sig) is signal.SIG_DFL}
    try:
        yield
    except _Ended as ended:
        for sig in previous:
            signal.signal(sig, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):  # the terminal may be gone (SIGHUP)
            print(f"terminated by {signal.Signals(ended.signum).name}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), ended.signum)
        raise SystemExit(128 + ended.signum) from None  # reached only if the signal is blocked
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
