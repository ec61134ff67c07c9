"""One workspace, one writer: an advisory lock that a training run holds for its whole length.

The lock is `fcntl.flock` on `<workspace>/.minigpt.lock`; the file also names the holder
(PID, host, start time, command) so that a second writer, `prepare` or the UI can say who holds
it. The kernel drops a flock when its process dies, so a crashed run never leaves the workspace
locked; a file whose flock is free is only a record of the last holder. Takers go one at a time
(a flock on the workspace folder for the moment it takes), so breaking the lock of a dead holder
never breaks one that another taker has just taken.

The lock file is never followed or opened when it is a symbolic link, a FIFO, a device or a folder
(`files.open_regular`): a link could truncate a file outside the workspace, a FIFO would block.
A workspace's lock also covers the folders it writes into: one whose `checkpoints/`, `logs/`,
`data/`, `tokenizer/` or `previous/` resolve into another workspace is refused, naming both.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from minigpt.errors import FileSystemError, UnsafePathError, WorkspaceLockedError
from minigpt.io.commit import finish_pending
from minigpt.io.crash_points import crash_point
from minigpt.io.files import open_regular, os_error

LOCK_NAME = ".minigpt.lock"
WRITE_FOLDERS = ("checkpoints", "logs", "data", "tokenizer", "previous")  # what a writer of a workspace writes into
# what each command writes (train only reads data/ and tokenizer/: sharing them by a link is fine)
WRITES = {"train": ("checkpoints", "logs", "previous"), "prepare": ("data", "tokenizer")}
TAKING_WAIT_S = 10.0  # how long a taker waits for another to finish taking the lock (milliseconds, normally)
_MARKERS = (LOCK_NAME, "tokenizer/char_tokenizer.json", "checkpoints/mini_gpt_latest.pt")  # a workspace has one


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
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: "[[[[..." nested 2,000 deep
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


def holder(workspace: str | os.PathLike, *, refuse_unsafe: bool = False) -> LockHolder | None:
    """Who is writing this workspace now, or None. Never takes the lock (a momentary shared probe
    at most); cheap enough to poll from a UI. A lock file that is a link, a FIFO, a device or a
    folder is never opened (a FIFO would block the reader forever): None, or UnsafePathError
    naming it with `refuse_unsafe`."""
    path = lock_path(workspace)
    try:
        fd = open_regular(path, os.O_RDONLY, what="the workspace lock", action="lock")
    except UnsafePathError:
        if refuse_unsafe:
            raise
        return None
    except FileSystemError:  # missing, not a folder, permission denied: nobody we can name
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


def _workspace_of(folder: Path, own_root: Path) -> Path | None:
    """The workspace (other than `own_root`) into whose own write folders the resolved `folder`
    leads, if any (a folder elsewhere under a workspace, say `other/runs/x`, collides with nothing).
    Markers are compared by what they resolve to: one inside `folder` itself is the folder's own
    content (`checkpoints/` moved to `store/checkpoints` and linked back makes `store` look like a
    workspace, and is not one)."""
    for parent in folder.parents:
        if parent == own_root or parent in own_root.parents:
            return None  # inside our own workspace, or a folder above it
        markers = [parent / marker for marker in _MARKERS if os.path.lexists(parent / marker)]
        if any(folder not in Path(os.path.realpath(m)).parents for m in markers):
            return parent if folder.relative_to(parent).parts[0] in WRITE_FOLDERS else None
    return None


def refuse_shared_folders(workspace: str | os.PathLike, folders: tuple[str, ...] = WRITE_FOLDERS) -> None:
    """Raise UnsafePathError when one of `folders` (those a command writes into) resolves into
    another workspace (`checkpoints -> ../other/checkpoints`): both would write, archive and lock apart."""
    root = Path(workspace).expanduser()
    real_root = Path(os.path.realpath(root))
    for name in folders:
        real = Path(os.path.realpath(root / name))
        if real == real_root / name:
            continue
        other = _workspace_of(real, real_root)
        if other is not None:
            raise UnsafePathError(
                f"Refused to write workspace {root}: its {name}/ resolves to {real}, inside another workspace "
                f"{other}; two workspaces would write (and archive) the same files, each under its own lock",
                path=root / name,
                causes=[
                    f"replace the link {root / name} with a folder of its own",
                    f"or work in {other} itself (--workspace {other})",
                ],
            )


@dataclass
class WorkspaceLock:
    """Held exclusive lock; `release()` (or leaving the `with` block) empties and unlocks it."""

    path: Path
    fd: int
    holder: LockHolder
    notices: list[str] = field(default_factory=list)
    created: bool = False  # this acquire created the lock file
    pid: int = field(default_factory=os.getpid)  # the process that took it: only it may release it

    def release(self, *, discard: bool = False) -> None:
        """Empty and unlock the file; `discard` also removes it when this lock created it (a refused
        command leaves the workspace as it found it). In a forked child (which shares the parent's
        flock through the inherited descriptor) it only closes the child's descriptor: unlocking
        or emptying would release the parent's lock."""
        if self.fd < 0:
            return
        if os.getpid() != self.pid:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self.fd, 0)  # "nobody holds it" for readers that do not probe the flock
        if discard and self.created:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # under the flock: a newcomer's inode check sees it gone
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> WorkspaceLock:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.release(discard=exc_type is not None)


def _open_lock(path: Path) -> tuple[int, bool]:
    """The lock file's descriptor (read-write) and whether this call created it."""
    try:
        return open_regular(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, what="the workspace lock", action="lock"), True
    except FileSystemError as exc:
        if exc.errno != errno.EEXIST:
            raise
    fd = open_regular(path, os.O_RDWR | os.O_CREAT, what="the workspace lock", action="lock")
    links = os.fstat(fd).st_nlink
    if links > 1:  # a hard link to a file elsewhere: emptying the lock would empty that file too
        os.close(fd)
        raise UnsafePathError(
            f"Refused to lock {path}: the workspace lock has {links} hard links, so another file shares its "
            "content; minigpt empties and rewrites the lock and would change that file too",
            path=path,
            causes=[f"remove it (rm {path}): minigpt creates the lock itself"],
        )
    return fd, False


def _same_file(fd: int, path: Path) -> bool:
    """The locked descriptor is still the file at `path` (not one a releasing holder just removed)."""
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def _taking(root: Path) -> Iterator[bool]:
    """One process at a time takes (or breaks) this workspace's lock: an exclusive flock on the
    workspace folder itself, held for the few milliseconds between opening the lock file and
    writing our record in it. Without it, a lock whose record names a dead process could be
    broken by one taker just after another flocked it and before it wrote its record: both would
    then hold the workspace. Yields whether breaking a held lock is safe: False where a folder
    cannot be flocked (NFS), and a held lock is then never broken."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise os_error(exc, root, action="lock") from None
    try:
        give_up = time.monotonic() + TAKING_WAIT_S
        busy, supported = False, True
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    supported = False  # serialised by nothing here, so nothing is ever broken
                    break
            if not busy:
                busy = True
                crash_point("lock-busy")
            if time.monotonic() > give_up:
                raise WorkspaceLockedError(
                    f"workspace {root} is in use: another process has been taking its lock for "
                    f"{TAKING_WAIT_S:.0f} s (it flocks the folder {root} while it does)",
                    path=root,
                    causes=["a process stopped while taking the lock (a debugger?)", "try again in a moment"],
                )
            time.sleep(0.01)
        yield supported
    finally:
        os.close(fd)  # closing drops the flock


def acquire(workspace: str | os.PathLike, command: str = "train", *, retries: int = 3) -> WorkspaceLock:
    """Take the workspace's writer lock or raise WorkspaceLockedError naming the holder.

    A lock file left by a dead process (its flock is free) is taken over with a notice. A flock
    still held although the recorded holder is dead on this host (a child that inherited the
    descriptor) is broken by replacing the file, also with a notice; takers go one at a time
    (`_taking`), so a lock another taker has just flocked is never broken. An update that a killed
    writer left half done (`commit`) is finished before this returns, with a notice. A lock file
    that is a link or a special file, and folders that lead into another workspace, raise
    UnsafePathError.
    """
    path = lock_path(workspace)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # the workspace (or a folder above it) is a file
        raise os_error(OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path.parent)), path) from None
    except OSError as exc:
        raise os_error(exc, path) from None
    refuse_shared_folders(path.parent, WRITES.get(command, WRITE_FOLDERS))
    with _taking(path.parent) as may_break:
        held = _take(path, workspace, command, retries, may_break)
    try:
        held.notices += finish_pending(path.parent)
    except BaseException:
        held.release(discard=True)
        raise
    return held


def _take(path: Path, workspace: str | os.PathLike, command: str, retries: int, may_break: bool) -> WorkspaceLock:
    notices: list[str] = []
    for attempt in range(retries + 1):
        fd, created = _open_lock(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise os_error(exc, path, action="lock") from None
            found = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            os.close(fd)
            dead = found is not None and found.host == socket.gethostname() and not _pid_alive(found.pid)
            if dead and may_break and found is not None:
                notices.append(f"broke the lock of {found.describe()}: that process is gone")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
                continue
            if (found is None or dead) and attempt < retries:
                time.sleep(0.05)  # a reader's momentary probe, or a taker about to write its record
                continue
            who = found.describe() if found else "another process (its record is unreadable)"
            if dead:
                who += ", which is gone, though a process it started still holds the lock"
            raise WorkspaceLockedError(
                f"workspace {Path(workspace)} is in use: {who} holds {path}",
                path=path,
                holder=found,
                causes=["wait for that run to finish or stop it", "train in another --workspace"],
            ) from None
        if not _same_file(fd, path):  # the previous holder removed the file between our open and flock
            os.close(fd)
            continue
        crash_point("lock-flocked")
        previous = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
        if previous is not None:
            notices.append(f"took over a stale lock left by {previous.describe()}")
        me = LockHolder(pid=os.getpid(), host=socket.gethostname(), started=time.time(), command=command)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me.__dict__).encode() + b"\n", 0)
        return WorkspaceLock(path=path, fd=fd, holder=me, notices=notices, created=created)
    raise WorkspaceLockedError(f"could not take the lock {path}", path=path, holder=None)
