"""Writes that never leave a file half-written or lose the old one on failure.

A write goes to a temporary file in the target's folder, is fsynced, then `os.replace`d over the
target (`atomic_open`, `atomic_write_text`, `atomic_torch_save`); `staged_open` and the `stage_*`
functions stop before the rename, so several files are written first and replaced together last.
A target that is a character device or a FIFO (`/dev/stdout`, a shell's `>(...)`) cannot be
renamed over: its content is gathered and written into it (`InPlaceWrite`). Every OS refusal is
raised as a `FileSystemError` (`minigpt.io.files.os_error`).
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
from minigpt.io.files import file_kind, os_error

FIFO_READER_WAIT_S = 10.0  # how long a write into a FIFO waits for a reader to open it


class StagedWrite:
    """A complete, fsynced temporary file next to `path`; `commit()` moves it over `path`,
    `discard()` removes it. Lets several files be written first and replaced together last."""

    def __init__(self, path: Path, tmp: str, fh: IO):
        self.path = path
        self.tmp = tmp
        self.fh = fh  # open while the `staged_open` block runs
        self.journaled = False  # named in an update journal (`commit.commit_together`): its reader renames it

    def commit(self) -> None:
        try:
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.discard()
            raise os_error(exc, self.path, kept=True) from exc
        fsync_folder(self.path.parent)

    def discard(self) -> None:
        if self.journaled:
            return  # the journal's update is decided: whoever finishes it needs this file
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
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
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

    def write(self, data: bytes) -> int:
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


def stage_same_file(staged: StagedWrite, path: str | os.PathLike) -> StagedWrite:
    """`path` staged as a second name of `staged`'s content: a hard link to its temporary file (a
    fsynced copy where links are refused), so the two are replaced together and stay one file."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
        os.close(fd)
        os.unlink(tmp)  # the name only: the link takes it
        try:
            os.link(staged.tmp, tmp)
        except OSError:
            with staged_open(path, "wb") as copy, open(staged.tmp, "rb") as src:
                shutil.copyfileobj(src, copy.fh, 1 << 20)
            return copy
    except OSError as exc:
        raise os_error(exc, path, kept=True) from exc
    return StagedWrite(path, tmp, staged.fh)


def stage_text(text: str, path: str | os.PathLike) -> StagedWrite:
    with staged_open(path, "w", encoding="utf-8") as staged:
        staged.fh.write(text)
    return staged


def atomic_write_text(text: str, path: str | os.PathLike) -> None:
    stage_text(text, path).commit()


NAME_MAX = 255  # bytes in one file name on Linux and macOS file systems
TEMP_SUFFIX_BYTES = 8 + len(".tmp")  # what mkstemp adds after the prefix: its random part, then the suffix


def temp_prefix(path: Path, tag: str = "") -> str:
    """How a temporary file beside `path` starts: `.NAME.[TAG.]PID@HOST.` (`leftovers` reads the
    writer back from it, to remove the file once that process is gone). NAME is cut short where the
    whole temporary name would pass NAME_MAX: a legal 255-byte file name must still be writable."""
    tail = f".{tag + '.' if tag else ''}{os.getpid()}@{temp_host()}."
    name = os.fsencode(path.name)
    room = NAME_MAX - 1 - len(os.fsencode(tail)) - TEMP_SUFFIX_BYTES
    return f".{os.fsdecode(name[: max(1, room)])}{tail}"


def temp_host() -> str:
    """This machine's short name, as temporary files carry it (a workspace may be shared over NFS)."""
    return socket.gethostname().split(".")[0]


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


def fsync_folder(folder: Path) -> None:
    """Make a rename inside `folder` survive a power cut (not supported everywhere)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
