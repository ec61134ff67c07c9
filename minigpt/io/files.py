"""Atomic writes (nothing on disk is ever half-written or lost on failure) and typed OS errors.

`os_error` turns an `OSError` into a `FileSystemError` that names the path and says what to do,
classified by errno (never by message text). `atomic_open` raises it for every failed write.
"""

from __future__ import annotations

import contextlib
import errno as E
import io
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from minigpt.errors import FileSystemError, UnsafePathError

_DISK_FULL = {E.ENOSPC, getattr(E, "EDQUOT", E.ENOSPC)}
_DENIED = {E.EACCES, E.EPERM}
FIFO_READER_WAIT_S = 10.0  # how long a write into a FIFO waits for a reader to open it
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


def open_log(path: str | os.PathLike, mode: str = "a", *, what: str = "the log") -> IO:
    """A log file opened for appending (`"a"`, text, UTF-8) or for writing from empty (`"wb"`) through
    `open_regular`: a link or a special file in its place is refused, never followed."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if mode.startswith("a") else os.O_TRUNC)
    fd = open_regular(path, flags, what=what)
    if "b" in mode:
        return os.fdopen(fd, mode)
    return os.fdopen(fd, mode, encoding="utf-8")


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


class StagedWrite:
    """A complete, fsynced temporary file next to `path`; `commit()` moves it over `path`,
    `discard()` removes it. Lets several files be written first and replaced together last."""

    def __init__(self, path: Path, tmp: str, fh: IO):
        self.path = path
        self.tmp = tmp
        self.fh = fh  # open while the `staged_open` block runs

    def commit(self) -> None:
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise os_error(exc, self.path, kept=True) from exc
        # fsync the folder so the rename itself survives a power cut (not supported everywhere)
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def discard(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


class InPlaceWrite(StagedWrite):
    """The write of a path that is a character device or a FIFO (`/dev/null`, `/dev/stdout`, a
    shell's `>(...)`), or a link to one: renaming a file over it would replace the device or the
    pipe with a regular file, so the content is gathered in memory and `commit()` writes it into
    what the path opens."""

    def __init__(self, path: Path, fh: IO, encoding: str | None):
        super().__init__(path, "", fh)
        self.encoding = encoding or "utf-8"
        self.data = b""

    def commit(self) -> None:
        fd = _open_in_place(self.path)
        try:
            os.set_blocking(fd, True)  # a reader that is slower than us: wait for it, as a shell does
            view = memoryview(self.data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            raise os_error(exc, self.path) from None
        finally:
            os.close(fd)

    def discard(self) -> None:
        self.data = b""


def _open_in_place(path: Path) -> int:
    """A write descriptor of the device or FIFO at `path`. O_NONBLOCK: a FIFO that nothing reads
    fails with ENXIO instead of blocking for ever; its reader may be starting (`mkfifo f;
    minigpt check --json f & cat f`), so that is retried for FIFO_READER_WAIT_S, then refused."""
    give_up = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno != E.ENXIO:
                raise os_error(exc, path) from None
            if time.monotonic() >= give_up:
                raise FileSystemError(
                    f"Cannot write {path}: it is a FIFO (named pipe) that nothing read in {FIFO_READER_WAIT_S:.0f} s",
                    path=path,
                    errno=exc.errno,
                    causes=[f"start its reader first (cat {path}), or write to a regular file"],
                ) from None
        time.sleep(0.05)


def _write_target(path: Path) -> str:
    """How `staged_open` writes `path`: "replace" (absent, a regular file, a folder: the rename
    reports a folder), "in place" (a character device or a FIFO, or a link to one); a block
    device or a socket raise UnsafePathError."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "replace"  # absent, a dangling link, a loop: the rename and its errors say
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return "replace"
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "in place"
    raise UnsafePathError(
        f"Refused to write {path}: it is {file_kind(mode)}, not a regular file, a character device or a FIFO",
        path=path,
        causes=[f"write to a regular file instead, or remove {path} first"],
    )


@contextlib.contextmanager
def staged_open(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[StagedWrite]:
    """Write a temporary file in `path`'s folder and fsync it; `path` itself is untouched.

    Use as `with staged_open(p) as staged: staged.fh.write(...)`, then `staged.commit()` (or
    `.discard()`). On any exception the temporary file is removed; an OS refusal is raised as
    `FileSystemError`. A `path` that is a character device or a FIFO is never renamed over:
    `commit()` writes into it (see `InPlaceWrite`); a block device or a socket is refused.
    """
    path = Path(path)
    if _write_target(path) == "in place":
        buffer: io.BytesIO | io.StringIO = io.BytesIO() if "b" in mode else io.StringIO()
        in_place = InPlaceWrite(path, buffer, encoding)
        yield in_place
        value = buffer.getvalue()
        in_place.data = value if isinstance(value, bytes) else value.encode(in_place.encoding)
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}@{temp_host()}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp makes 0600; a shared workspace needs the umask's mode
    except OSError as exc:
        raise os_error(exc, path, kept=True) from exc
    fh = os.fdopen(fd, mode, encoding=encoding)
    staged = StagedWrite(path, tmp, fh)
    try:
        yield staged
        fh.flush()
        os.fsync(fh.fileno())
        fh.close()
    except BaseException as exc:
        # closing flushes what is buffered, which fails again on a full disk: report the first error
        with contextlib.suppress(OSError):
            fh.close()
        staged.discard()
        if isinstance(exc, OSError) and not isinstance(exc, FileSystemError):
            raise os_error(exc, path, kept=True) from exc
        raise


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Write to a temporary file in the same folder, fsync, then `os.replace` over `path`.

    On any exception the temporary file is removed and `path` keeps its old content; an OS
    refusal (disk full, read-only, permission denied, ...) is raised as `FileSystemError`.
    """
    with staged_open(path, mode, encoding) as staged:
        yield staged.fh
    staged.commit()


class _WriteRecorder:
    """Passes writes to `fh` and keeps the OSError one raised: torch.save reports a failed write
    as a RuntimeError ("enforce fail at inline_container.cc") with the OSError only as context."""

    def __init__(self, fh: IO[bytes]):
        self.fh = fh
        self.error: OSError | None = None

    def write(self, data) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = exc
            raise

    def flush(self) -> None:
        self.fh.flush()


def stage_torch_save(obj: object, path: str | os.PathLike) -> StagedWrite:
    """`torch.save` into a staged temporary file next to `path` (see `StagedWrite`)."""
    import torch  # here, not at the top: the tokenizer (and the TUI's first paint) use this module

    with staged_open(path, "wb") as staged:
        recorder = _WriteRecorder(staged.fh)
        try:
            torch.save(obj, cast(IO[bytes], recorder))  # torch needs only write() and flush()
        except RuntimeError as exc:
            if recorder.error is not None:
                raise os_error(recorder.error, path, kept=True) from exc
            raise
    return staged


def atomic_torch_save(obj: object, path: str | os.PathLike) -> None:
    stage_torch_save(obj, path).commit()


def stage_text(text: str, path: str | os.PathLike) -> StagedWrite:
    with staged_open(path, "w", encoding="utf-8") as staged:
        staged.fh.write(text)
    return staged


def atomic_write_text(text: str, path: str | os.PathLike) -> None:
    stage_text(text, path).commit()


def temp_host() -> str:
    """This machine's short name, as temporary files carry it (a workspace may be shared over NFS)."""
    return socket.gethostname().split(".")[0]


def describe_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def current_umask() -> int:
    """The process umask, read without changing it where /proc says it (Linux >= 4.7); else the
    classic set-and-restore (a tiny race with other threads creating files, acceptable here)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass  # no /proc: fall back below
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
