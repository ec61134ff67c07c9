"""The on-disk layout of a run, as users of the char-level MiniGPT recipe have it."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from minigpt.errors import FileSystemError
from minigpt.io.files import atomic_open, os_error

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Workspace:
    root: Path

    def __init__(self, root: str | Path = "."):
        object.__setattr__(self, "root", Path(root).expanduser())

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer" / "char_tokenizer.json"

    def ids(self, split: str) -> Path:
        return self.root / "data" / "encoded" / f"{split}_ids.pt"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "mini_gpt_best.pt"

    @property
    def latest_checkpoint(self) -> Path:
        return self.checkpoints / "mini_gpt_latest.pt"

    @property
    def metrics(self) -> Path:
        return self.root / "logs" / "metrics.jsonl"

    @property
    def grads(self) -> Path:
        return self.root / "logs" / "grads.jsonl"

    @property
    def samples(self) -> Path:
        """A short sample at a fixed prompt and seed per evaluation (see `minigpt.logs.samples`)."""
        return self.root / "logs" / "samples.jsonl"

    @property
    def loop_log(self) -> Path:
        """What `minigpt.watch` saw of a training loop (see `minigpt.loopwatch`)."""
        return self.root / "logs" / "loop.jsonl"

    @property
    def ranks(self) -> Path:
        """One file per DDP rank above 0 of a watched run: the batches each rank saw."""
        return self.root / "logs" / "ranks"

    def log_files(self) -> tuple[Path, ...]:
        """The logs a run writes (a fresh run moves the earlier run's aside first)."""
        return (self.metrics, self.grads, self.loop_log, self.samples)

    def run_files(self) -> tuple[Path, ...]:
        """Everything a fresh training run moves to previous/<time>/: its checkpoints and logs."""
        return (self.best_checkpoint, self.latest_checkpoint, *self.log_files())

    def required_files(self) -> dict[str, Path]:
        files = {"tokenizer": self.tokenizer}
        files.update({f"{s}_ids": self.ids(s) for s in SPLITS})
        return files


def archive_run(ws: Workspace, paths: Iterable[Path]) -> Path | None:
    """A fresh run never overwrites an earlier one: the non-empty files among `paths` move to
    `<workspace>/previous/<time>/` (same relative paths) first. Returns that folder, or None when
    there was nothing to move.

    All or nothing: a file on another file system than `previous/` (`logs/` or `checkpoints/`
    linked onto a scratch disk or a tmpfs) is copied and fsynced, and its source removed only
    once every file has reached `previous/`; any failure moves back what was moved, removes the
    copies and raises FileSystemError, leaving every file where it was."""
    old = [p for p in paths if p.is_file() and p.stat().st_size > 0]
    if not old:
        return None
    dest = ws.root / "previous" / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while dest.exists():
        dest, n = dest.with_name(f"{dest.name.split('.')[0]}.{n}"), n + 1
    renamed: list[tuple[Path, Path]] = []
    copied: list[tuple[Path, Path]] = []
    path = old[0]
    try:
        for path in old:
            target = dest / path.relative_to(ws.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(path, target)
                renamed.append((path, target))
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                _copy_durably(path, target)
                copied.append((path, target))
    except OSError as exc:
        for source, target in reversed(renamed):
            with contextlib.suppress(OSError):
                os.replace(target, source)
        for _, target in copied:
            with contextlib.suppress(OSError):
                target.unlink()
        _remove_empty_folders(dest)
        found = os_error(exc, path, action="move to previous/")
        raise FileSystemError(
            f"{found.message} (nothing was moved: the previous run's files are where they were)",
            path=path,
            errno=found.errno,
            causes=found.causes,
        ) from exc
    for source, _ in copied:
        source.unlink()
    return dest


def _copy_durably(source: Path, target: Path) -> None:
    """Copy `source` to `target` across file systems: a temp file next to `target`, fsynced, then
    renamed, so `target` is whole or absent."""
    with atomic_open(target, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
    shutil.copystat(source, target)


def _remove_empty_folders(folder: Path) -> None:
    """Remove `folder` and the folders under it when they hold no file (a failed archive's)."""
    if not folder.is_dir():
        return
    for sub in sorted((p for p in folder.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        folder.rmdir()
