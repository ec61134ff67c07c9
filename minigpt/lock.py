"""One workspace, one writer: an advisory lock that a training run holds for its whole length.

The lock is `fcntl.flock` on `<workspace>/.minigpt.lock`; the file also names the holder
(PID, host, start time, command) so that a second writer, `prepare` or the UI can say who holds
it. The kernel drops a flock when its process dies, so a crashed run never leaves the workspace
locked; a file whose flock is free is only a record of the last holder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import WorkspaceLockedError

LOCK_NAME = ".minigpt.lock"


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    started: float  # Unix time the holder took the lock
    command: str = "train"

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"`minigpt {self.command}` (PID {self.pid} on host {self.host}, started {when})"


def lock_path(workspace: str | os.PathLike) -> Path:
    return Path(workspace).expanduser() / LOCK_NAME


def _parse(text: str) -> LockHolder | None:
    try:
        data = json.loads(text)
        return LockHolder(
            pid=int(data["pid"]), host=str(data["host"]), started=float(data["started"]), command=str(data["command"])
        )
    except (ValueError, KeyError, TypeError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _flock_free(fd: int) -> bool:
    """Probe with a shared lock, released at once: True when nobody holds the exclusive one."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    fcntl.flock(fd, fcntl.LOCK_UN)
    return True


def holder(workspace: str | os.PathLike) -> LockHolder | None:
    """Who is writing this workspace now, or None. Never takes the lock (a momentary shared probe
    at most); cheap enough to poll from a UI."""
    path = lock_path(workspace)
    try:
        fd = os.open(path, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    try:
        text = os.read(fd, 4096).decode("utf-8", "replace")
        if not text.strip():
            return None  # released cleanly: the holder empties the file before unlocking
        found = _parse(text)
        if found is not None and found.host == socket.gethostname() and not _pid_alive(found.pid):
            return None  # stale record of a dead process
        if _flock_free(fd):
            return None
        return found or LockHolder(pid=0, host="?", started=0.0, command="?")
    finally:
        os.close(fd)


@dataclass
class WorkspaceLock:
    """Held exclusive lock; `release()` (or leaving the `with` block) empties and unlocks it."""

    path: Path
    fd: int
    holder: LockHolder
    notices: list[str] = field(default_factory=list)

    def release(self) -> None:
        if self.fd < 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)  # "nobody holds it" for readers that do not probe the flock
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> WorkspaceLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def acquire(workspace: str | os.PathLike, command: str = "train", *, retries: int = 3) -> WorkspaceLock:
    """Take the workspace's writer lock or raise WorkspaceLockedError naming the holder.

    A lock file left by a dead process (its flock is free) is taken over with a notice. A flock
    still held although the recorded holder is dead on this host (a child that inherited the
    descriptor) is broken by replacing the file, also with a notice.
    """
    path = lock_path(workspace)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # the workspace (or a folder above it) is a file
        from .fileio import os_error

        raise os_error(OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent)), path) from None
    except OSError as exc:
        from .fileio import os_error

        raise os_error(exc, path) from None
    notices: list[str] = []
    for attempt in range(retries + 1):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
            found = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            os.close(fd)
            if found is not None and found.host == socket.gethostname() and not _pid_alive(found.pid):
                notices.append(f"broke the lock of {found.describe()}: that process is gone")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            if found is None and attempt < retries:
                time.sleep(0.05)  # a reader's momentary probe, or a holder writing its record
                continue
            who = found.describe() if found else "another process (its record is unreadable)"
            raise WorkspaceLockedError(
                f"workspace {Path(workspace)} is in use: {who} holds {path}",
                path=path,
                holder=found,
                causes=["wait for that run to finish or stop it", "train in another --workspace"],
            ) from None
        previous = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        if previous is not None:
            notices.append(f"took over a stale lock left by {previous.describe()}")
        me = LockHolder(pid=os.getpid(), host=socket.gethostname(), started=time.time(), command=command)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me.__dict__).encode() + b"\n", 0)
        return WorkspaceLock(path=path, fd=fd, holder=me, notices=notices)
    raise WorkspaceLockedError(f"could not take the lock {path}", path=path, holder=None)
