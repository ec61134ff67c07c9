"""An update of several files of a workspace that a crash leaves old or new, never a mix.

`commit_together` replaces files staged beside their targets (complete and fsynced:
`atomic.staged_open`) and removes others, as one update:

1. the journal `<workspace>/.minigpt.update` is written atomically (temp, fsync, rename, fsync of
   the folder): it names each staged file, the file it replaces, the files to remove, and who
   wrote it. From that moment the update is decided;
2. the renames, then the removals, each made durable (the folder fsynced);
3. the journal is removed.

A process killed before step 1 leaves the old files and its staged ones, which carry its PID
(`leftovers.remove_dead_temp_files` removes them; never one a journal names). A process killed
after it leaves the journal: the next writer finishes the update as soon as it holds the
workspace lock (`lock.acquire` calls `finish_pending`), and so does the next reader
(`workspace.settle`), with a notice that says what was finished. Finishing is idempotent: a
staged file already gone was renamed, a file to remove already gone was removed, so a crash while
finishing is finished by the command after.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from minigpt.errors import DataError, FileSystemError
from minigpt.io.atomic import InPlaceWrite, StagedWrite, atomic_write_text, fsync_folder
from minigpt.io.crash_points import crash_point
from minigpt.io.files import open_regular, os_error

JOURNAL_NAME = ".minigpt.update"
MAX_JOURNAL_BYTES = 1 << 20  # a journal names a few files: anything larger is not one of ours


@dataclass(frozen=True)
class Journal:
    """An update in progress: `replace` pairs (staged file, target) and `remove`, relative to the workspace."""

    command: str  # the minigpt command that wrote it ("prepare", "import", "train")
    what: str  # the update in words: "the corpus b.txt (vocab 40)"
    pid: int
    host: str
    started: float  # Unix time the journal was written
    replace: tuple[tuple[str, str], ...]
    remove: tuple[str, ...]

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"`minigpt {self.command}` (PID {self.pid} on host {self.host}, {when})"


def journal_path(root: str | os.PathLike) -> Path:
    return Path(root).expanduser() / JOURNAL_NAME


def commit_together(
    root: str | os.PathLike,
    staged: Sequence[StagedWrite],
    *,
    remove: Iterable[Path] = (),
    command: str,
    what: str,
) -> None:
    """Replace each staged file's target and remove `remove`, all or nothing whatever stops the
    process (see the module). The caller holds the workspace lock. Staged writes named in the
    journal are never discarded afterwards: the journal's reader needs them."""
    root = Path(root).expanduser()
    # a target that is a device or a FIFO is written into, never renamed over: no journal can undo
    # or redo that, so it is written once the rest is in place
    in_place = [w for w in staged if isinstance(w, InPlaceWrite)]
    staged = [w for w in staged if not isinstance(w, InPlaceWrite)]
    journal = Journal(
        command=command,
        what=what,
        pid=os.getpid(),
        host=socket.gethostname(),
        started=time.time(),
        replace=tuple((_relative(root, Path(w.tmp)), _relative(root, w.path)) for w in staged),
        remove=tuple(_relative(root, p) for p in remove),
    )
    text = json.dumps({**journal.__dict__, "replace": [list(p) for p in journal.replace]}, indent=1) + "\n"
    atomic_write_text(text, journal_path(root))
    for write in staged:
        write.journaled = True
    crash_point("update-journaled")
    try:
        _apply(root, journal)
    except KeyboardInterrupt:
        _apply(root, journal)  # Ctrl-C between two renames: finish them, then stop
        raise
    for write in in_place:
        write.commit()


def pending(root: str | os.PathLike) -> Journal | None:
    """The journal of an update that was started and not finished, or None (one `lstat` when none).
    A journal that is no file of ours raises DataError naming it."""
    path = journal_path(root)
    if not os.path.lexists(path):
        return None
    try:
        fd = open_regular(path, os.O_RDONLY, what="the update journal", action="read")
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_JOURNAL_BYTES + 1)
    except FileNotFoundError:
        return None  # finished by another process meanwhile
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    try:
        data = json.loads(raw)
        return Journal(
            command=str(data["command"]),
            what=str(data["what"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            started=float(data["started"]),
            replace=tuple((_inside(str(a)), _inside(str(b))) for a, b in data["replace"]),
            remove=tuple(_inside(str(p)) for p in data["remove"]),
        )
    except (ValueError, KeyError, TypeError, RecursionError):
        raise DataError(
            f"Not a minigpt update journal: {path} cannot be read as one ({len(raw)} bytes), so an interrupted "
            "update of this workspace cannot be finished",
            path=path,
            causes=[
                "another program wrote that name",
                f"look at the files it names, then remove it (rm {path}); re-run prepare or import if in doubt",
            ],
        ) from None


def finish_pending(root: str | os.PathLike) -> list[str]:
    """Finish the update a killed process left (the caller holds the workspace lock, so its writer
    is gone); one notice saying what was finished, or [] when nothing was pending."""
    root = Path(root).expanduser()
    journal = pending(root)
    if journal is None:
        return []
    missing = _apply(root, journal)
    done = [f"replaced {target}" for _, target in journal.replace] + [f"removed {p}" for p in journal.remove]
    notice = (
        f"finished the update that {journal.describe()} was stopped in the middle of, {journal.what}: "
        f"{', '.join(done[:6])}{', …' if len(done) > 6 else ''}; the workspace holds the updated files"
    )
    if missing:
        notice += f"; but {', '.join(missing)} could not be found (removed by hand?)"
    return [notice]


def journaled_temps(root: str | os.PathLike) -> set[Path]:
    """The staged files a pending journal still needs (never removed as leftovers)."""
    try:
        journal = pending(root)
    except (DataError, FileSystemError):
        journal = None
    if journal is None:
        return set()
    return {Path(root).expanduser() / tmp for tmp, _ in journal.replace}


def _apply(root: Path, journal: Journal) -> list[str]:
    """Do the journal's renames and removals (those not done yet), durably, then remove the
    journal; returns the targets neither staged nor in place (the update could not be finished for them)."""
    missing: list[str] = []
    folders: set[Path] = set()
    for tmp, target in journal.replace:
        source, dest = root / tmp, root / target
        try:
            os.replace(source, dest)
        except FileNotFoundError:
            if not os.path.lexists(dest):
                missing.append(target)  # neither staged nor in place
            continue  # renamed before the crash
        except OSError as exc:
            raise FileSystemError(
                f"{os_error(exc, dest).message} (the update of {journal.what} is half done: the next minigpt "
                f"command in this workspace finishes it, as {journal_path(root)} says)",
                path=dest,
                errno=exc.errno,
            ) from exc
        folders.add(dest.parent)
    for rel in journal.remove:
        path = root / rel
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            folders.add(path.parent)
    for folder in sorted(folders):
        fsync_folder(folder)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(journal_path(root))
    fsync_folder(root)
    return missing


def _relative(root: Path, path: Path) -> str:
    """`path` relative to the workspace (the journal stays valid when the workspace is moved)."""
    return os.path.relpath(path, root)


def _inside(rel: str) -> str:
    """A journal's path, refused when it leaves the workspace (a journal is never a way to rename elsewhere)."""
    if os.path.isabs(rel) or ".." in Path(rel).parts:
        raise ValueError(f"not a path inside the workspace: {rel}")
    return rel
