"""Files as the OS sees them: its refusals as typed errors, and opening only regular files.

`os_error` turns an `OSError` into a `FileSystemError` that names the path and says what to do,
classified by errno (never by message text). `stat_input` and `open_regular` refuse a symbolic
link, a FIFO, a device or a folder where a regular file belongs, before opening it (a FIFO would
block); `open_log` opens a log that way, and an OS error writing to it names the log (the OS names
no file for a failed `write`: a full disk would read "the OS did not name it"). `read_head` and
`lfs_pointer_message` tell a Git LFS pointer from the file it stands for. Writes that must survive
a crash are in `minigpt.io.atomic`.
"""

from __future__ import annotations

import contextlib
import errno as E
import io
import os
import shutil
import stat
from pathlib import Path
from typing import IO

from minigpt.errors import FileSystemError, UnsafePathError

_DISK_FULL = {E.ENOSPC, getattr(E, "EDQUOT", E.ENOSPC)}
_DENIED = {E.EACCES, E.EPERM}
KEPT = " (nothing was overwritten: the old file, if any, is intact)"
_UNNAMED = {
    E.ENOSPC: "Disk full: could not",
    E.EROFS: "Read-only file system: cannot",
    E.EACCES: "Permission denied: cannot",
}


def _file_in_the_way(path: Path) -> Path | None:
    """The first ancestor of `path` that exists and is not a folder (why ENOTDIR was raised)."""
    for parent in reversed([path, *path.parents]):
        try:
            st = parent.stat()
        except OSError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return parent
    return None


def os_error(exc: OSError, path: object = None, *, action: str = "write", kept: bool = False) -> FileSystemError:
    """A `FileSystemError` for `exc`, naming `path` (else `exc.filename`).

    `action` is a verb for the message ("write", "read", "create"); `kept` adds that the old
    file is intact (true for `atomic_open`). Classified by `exc.errno` only.
    """
    if isinstance(exc, FileSystemError):
        return exc
    named = path if path is not None else exc.filename
    where = Path(str(named)) if named is not None else Path(".")
    code = exc.errno
    if named is None:  # the OS did not say which file: say so, never "?"
        return FileSystemError(
            f"{_UNNAMED.get(code or 0, 'Cannot')} {action} a file (the OS did not name it): {exc.strerror or exc}",
            path=None,
            errno=code,
            causes=["free some space on the disk of the --workspace"] if code in _DISK_FULL else [],
        )
    causes: list[str] = []
    if code in _DISK_FULL:
        try:
            free = describe_size(shutil.disk_usage(_existing_folder(where)).free)
        except OSError:
            free = "unknown"
        message = f"Disk full: could not {action} {where}: no space left on the device ({free} free)"
        causes = ["free some space, or write to another --workspace on a bigger disk"]
    elif code == E.EROFS:
        message = f"Read-only file system: cannot {action} {where}"
        causes = ["the disk or folder is mounted read-only: use a writable --workspace"]
    elif code in _DENIED:
        message = f"Permission denied: cannot {action} {where}"
        causes = ["the file or its folder belongs to another user or is read-only (ls -l shows who may write)"]
    elif code == E.ENOTDIR:
        blocker = _file_in_the_way(where)
        what = f"{blocker} is a file, not a folder" if blocker else "a part of the path is not a folder"
        message = f"Not a directory: cannot {action} {where}: {what}"
        causes = ["a file has the name a folder should have (e.g. --workspace names a file)"]
    elif code == E.EISDIR:
        message = f"Is a directory: cannot {action} {where}: it is a folder, expected a file"
        causes = ["pass a file name, not a folder"]
    elif code == E.EEXIST:
        message = f"Cannot {action} {where}: it exists and is not a folder"
        causes = ["a file has the name a folder should have"]
    elif code == E.ELOOP:
        message = f"Symlink loop: cannot {action} {where}: its symbolic links point at each other"
        causes = ["fix or remove the link (ls -l shows where it points)"]
    elif code == E.ENOENT:
        message = f"Not found: cannot {action} {where}"
        causes = ["a typo in the path", "a folder of the path does not exist"]
    else:
        message = f"Cannot {action} {where}: {exc.strerror or exc}"
    if kept:
        message += KEPT
    return FileSystemError(message, path=where, errno=code, causes=causes)


def _existing_folder(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.is_dir():
            return parent
    return Path(".")


def stat_input(path: Path, what: str, *, error: type, missing: list[str] | None = None) -> os.stat_result:
    """`os.stat` of an input file that must be a regular file; a typed `error` (or a
    `FileSystemError` for permission problems) otherwise. A dangling link, a symlink loop, a
    FIFO and a folder each get their own message; none of them is opened (a FIFO would block)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise error(
                f"{what} not found: {path} is a symbolic link to {os.readlink(path)}, which does not exist",
                path=path,
            ) from None
        raise error(f"{what} not found: {path}", path=path, causes=missing or []) from None
    except OSError as exc:
        if exc.errno == E.ELOOP:
            raise error(
                f"{what} unreadable: {path} is a symlink loop (its links point at each other)", path=path
            ) from None
        raise os_error(exc, path, action="read") from None
    kind = file_kind(st.st_mode)
    if kind is not None:
        article = "an" if what[0].lower() in "aeiou" else "a"
        raise error(f"Not {article} {what.lower()}: {path} is {kind}, not a regular file", path=path)
    return st


def file_kind(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO (named pipe)", "a folder", ...); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse_special(path: Path, mode: int, what: str, action: str) -> None:
    kind = file_kind(mode)
    if kind is None:
        return
    if stat.S_ISLNK(mode):
        try:
            target = f" to {os.readlink(path)}"
        except OSError:
            target = ""
        raise UnsafePathError(
            f"Refused to {action} {path}: {what} is a symbolic link{target}; minigpt never {action}s through a "
            "link (it could point outside the workspace)",
            path=path,
            causes=[f"remove the link (rm {path}): minigpt creates the file itself"],
        )
    raise UnsafePathError(
        f"Refused to {action} {path}: {what} is {kind}, not a regular file (never opened: a FIFO or a device "
        "would block or act on open)",
        path=path,
        causes=[f"remove or rename {path}: minigpt creates the file itself"],
    )


def open_regular(
    path: str | os.PathLike, flags: int, mode: int = 0o666, *, what: str = "the file", action: str = "write"
) -> int:
    """`os.open` of a file that must be a regular one, never following a final symbolic link and never
    opening a FIFO, device or folder (checked with `lstat` before and `fstat` after, O_NOFOLLOW and
    O_NONBLOCK in between, so no race turns it into a blocking open). A missing file is created when
    `flags` has O_CREAT. Raises UnsafePathError for a link or a special file, FileSystemError for
    other OS refusals."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise os_error(exc, path, action=action) from None
    else:
        _refuse_special(path, st.st_mode, what, action)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (E.ELOOP, E.EISDIR, E.ENXIO):  # it became a link, a folder or a FIFO since the lstat
            with contextlib.suppress(OSError):
                _refuse_special(path, os.lstat(path).st_mode, what, action)
        raise os_error(exc, path, action=action) from None
    opened = os.fstat(fd).st_mode
    if file_kind(opened) is not None:  # swapped for a special file between the lstat and the open
        os.close(fd)
        _refuse_special(path, opened, what, action)
    return fd


def named(exc: OSError, path: object) -> OSError:
    """`exc` with `path` as its file name where the OS gave none (a `write`, `flush` or `fsync`)."""
    if exc.filename is None and isinstance(path, str):
        exc.filename = path
    return exc


class _NamesItsFile:
    """Mixin for a log's file object: an OS error from a write or a flush names the file."""

    name: object

    def write(self, data, /):  # type: ignore[no-untyped-def]
        try:
            return super().write(data)  # type: ignore[misc]
        except OSError as exc:
            raise named(exc, self.name) from None

    def flush(self) -> None:
        try:
            super().flush()  # type: ignore[misc]
        except OSError as exc:
            raise named(exc, self.name) from None


class _LogBytes(_NamesItsFile, io.BufferedWriter):
    """A log opened by `open_log` in binary."""


class _LogText(_NamesItsFile, io.TextIOWrapper):
    """A log opened by `open_log` as text (UTF-8)."""

    def __init__(self, buffer: io.BufferedWriter, mode: str) -> None:
        super().__init__(buffer, encoding="utf-8")
        self._mode = mode

    @property
    def mode(self) -> str:  # as `open` gives it: writers choose bytes or text by it
        return self._mode


def open_log(path: str | os.PathLike, mode: str = "a", *, what: str = "the log") -> IO:
    """A log file opened for appending (`"a"`, text, UTF-8) or for writing from empty (`"wb"`) through
    `open_regular`: a link or a special file in its place is refused, never followed. An OS error
    writing to it (a full disk) names it, as `os_error` needs."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = open_regular(path, flags, what=what)
    raw = io.FileIO(fd, "a" if mode.startswith("a") else "w")
    raw.name = os.fspath(path)  # the fd's number otherwise
    buffered = _LogBytes(raw)
    if "b" in mode:
        return buffered
    return _LogText(buffered, mode)


LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"


def lfs_pointer_message(path: object, head: bytes, size: int) -> str | None:
    """The message for a Git LFS pointer file (the repository was cloned without its LFS
    content), or None when `head` (the file's first bytes) is something else."""
    if not head.startswith(LFS_POINTER_PREFIX):
        return None
    return (
        f"{path} is a Git LFS pointer ({size} bytes), not the file itself: the repository was cloned "
        "without its LFS content. Fetch it with `git lfs pull` (run inside that repository; "
        "`git lfs install` first if git-lfs is new on this machine)"
    )


def read_head(path: Path, n: int = 64) -> bytes:
    """The first `n` bytes of `path` (an OS refusal as `FileSystemError`)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise os_error(exc, path, action="read") from None


def describe_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
