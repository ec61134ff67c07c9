"""The on-disk layout of a run, as users of the char-level MiniGPT recipe have it."""

from __future__ import annotations

import errno
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from minigpt.errors import FileSystemError
from minigpt.io import lock
from minigpt.io.atomic import atomic_open, fsync_folder
from minigpt.io.commit import JOURNAL_NAME, commit_together, journaled_temps, pending
from minigpt.io.crash_points import crash_point
from minigpt.io.files import os_error
from minigpt.io.leftovers import remove_dead_temp_files

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

    def watched_loop_lacks(self, path: Path | str) -> bool:
        """This is a watched loop's folder (the watch's record is here) and `path` is not: the
        watch writes logs only, never the loop's tokenizer or token IDs."""
        return self.loop_log.is_file() and not Path(path).exists()

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

    def write_folders(self) -> tuple[Path, ...]:
        """Where minigpt's commands stage files (and where a killed one leaves them)."""
        return (self.ids("train").parent, self.tokenizer.parent, self.checkpoints, self.metrics.parent)


@dataclass(frozen=True)
class Settled:
    """What `settle` did: the update it finished (a notice) and the leftovers it removed (one each)."""

    finished: list[str]
    removed: list[str]

    @property
    def notices(self) -> list[str]:
        return self.finished + self.removed


def settle(ws: Workspace, command: str) -> Settled:
    """What a command does before it reads or writes a workspace: finish an update that a killed
    writer left half done (`commit`; the workspace lock is taken for it) and remove the staged files
    that killed writers left. Raises WorkspaceLockedError when a live process holds the lock while
    an update is pending (it is replacing the files now)."""
    finished: list[str] = []
    if pending(ws.root) is not None:
        with lock.acquire(ws.root, command) as held:  # acquire finishes the update
            finished += held.notices
    removed = remove_dead_temp_files(ws.write_folders(), keep=journaled_temps(ws.root))
    # in the workspace folder itself, only a journal's own temporary file: the folder is the user's
    return Settled(finished, removed + remove_dead_temp_files([ws.root], prefix=f".{JOURNAL_NAME}."))


def archive_run(ws: Workspace, paths: Iterable[Path]) -> Path | None:
    """A fresh run never overwrites an earlier one: the non-empty files among `paths` move to
    `<workspace>/previous/<time>/` (same relative paths) first. Returns that folder, or None when
    there was nothing to move.

    All or nothing, whatever stops it: the files are first placed in `previous/<time>.partial/`
    (hard links; copies, fsynced, for a file on another file system than `previous/`, as when
    `logs/` or `checkpoints/` are links onto a tmpfs or a scratch disk; a symbolic link as a link),
    that folder is renamed to `previous/<time>/` in one step, and only then are the sources removed.
    A failure removes the partial folder and raises FileSystemError with every file where it was; a
    process killed before the rename leaves the sources and a `.partial` folder (the next archive
    removes it), one killed after it leaves the sources and a complete archive. The sources are
    removed as one update (`commit`): a process killed while removing them leaves a journal, and
    the next command removes the rest, never a run split between the workspace and the archive."""
    old = [p for p in paths if p.is_file() and p.stat().st_size > 0]
    if not old:
        return None
    previous = ws.root / "previous"
    _remove_unfinished(previous)
    dest = previous / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while dest.exists() or dest.with_name(dest.name + ".partial").exists():
        dest, n = dest.with_name(f"{dest.name.split('.')[0]}.{n}"), n + 1
    staging = dest.with_name(dest.name + ".partial")
    path = old[0]
    try:
        for path in old:
            target = staging / path.relative_to(ws.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            _place(path, target)
        crash_point("archive-staged")
        os.replace(staging, dest)  # the archive appears whole, or not at all
        fsync_folder(previous)
    except OSError as exc:
        if staging.is_dir():
            shutil.rmtree(staging, ignore_errors=True)
        found = os_error(exc, path, action="move to previous/")
        raise FileSystemError(
            f"{found.message} (nothing was moved: the previous run's files are where they were)",
            path=path,
            errno=found.errno,
            causes=found.causes,
        ) from exc
    crash_point("archive-complete")
    commit_together(ws.root, (), remove=old, command="train", what=f"moving the previous run to {dest}")
    return dest


def _place(source: Path, target: Path) -> None:
    """`source` at `target` too: a symbolic link as the same link, a file as a hard link, or as a
    durable copy where a link cannot be made (another file system, links not supported)."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
        return
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EOPNOTSUPP):
            raise
        _copy_durably(source, target)


def _remove_unfinished(previous: Path) -> None:
    """The `.partial` folders of archives that a killed process never completed (their sources
    were never removed, so nothing in them is only there)."""
    if previous.is_dir():
        for partial in previous.glob("*.partial"):
            if partial.is_dir() and not partial.is_symlink():
                shutil.rmtree(partial, ignore_errors=True)


def _copy_durably(source: Path, target: Path) -> None:
    """Copy `source` to `target` across file systems: a temp file next to `target`, fsynced, then
    renamed, so `target` is whole or absent."""
    with atomic_open(target, "wb") as out, open(source, "rb") as src:
        shutil.copyfileobj(src, out, 1 << 20)
    shutil.copystat(source, target)
