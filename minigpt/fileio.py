"""Atomic writes: nothing on disk is ever half-written or lost on failure."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Write to a temporary file in the same folder, fsync, then `os.replace` over `path`.

    On any exception the temporary file is removed and `path` keeps its old content.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    # fsync the folder so the rename itself survives a power cut (not supported everywhere)
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_torch_save(obj: object, path: str | os.PathLike) -> None:
    import torch  # here, not at the top: the tokenizer (and the TUI's first paint) use this module

    with atomic_open(path, "wb") as fh:
        torch.save(obj, fh)


def atomic_write_text(text: str, path: str | os.PathLike) -> None:
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def describe_size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
