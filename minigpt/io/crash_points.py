"""Named points between two writes of a multi-file update, where tests make the process die or wait.

`MINIGPT_KILL_AT=<name>` in the environment makes the process SIGKILL itself when it reaches
`crash_point("<name>")`: no handler, no `finally`, no flush runs, as with a power cut or the
kernel's OOM killer. The crash-consistency tests use it to check that every state a crash can
leave is one that `--resume`, `sample` and the UI read correctly. Unset (always, outside the
tests), a crash point is one dictionary lookup.

Two more settings, for tests only:

- `MINIGPT_KILL_AT=file-op:N` kills the process just before its N-th rename, link, unlink or fsync
  (1-based) of a path under `MINIGPT_FILE_OPS_UNDER` (a workspace), so a test can stop a command at
  every step of its update without naming each one; `MINIGPT_FILE_OPS_LOG=FILE` appends a line per
  such operation (`N op path`), which is how a test learns how many there are.
- `MINIGPT_PAUSE_AT=<name>=<folder>` makes the process stop at `crash_point("<name>")`: it creates
  `<folder>/<name>.paused` and waits until `<folder>/<name>.go` exists, so a test can hold it inside
  a window (between taking a lock and writing its record, say) while another process acts.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

KILL_AT = "MINIGPT_KILL_AT"
PAUSE_AT = "MINIGPT_PAUSE_AT"
FILE_OPS_UNDER = "MINIGPT_FILE_OPS_UNDER"
FILE_OPS_LOG = "MINIGPT_FILE_OPS_LOG"
FILE_OP = "file-op:"  # KILL_AT's prefix for "the N-th file operation"
PAUSE_LIMIT_S = 300.0  # a paused process goes on by itself after this long (a test that died)
# the os functions that change which file a name means, or make a change durable
FILE_OPS = ("replace", "rename", "link", "symlink", "unlink", "remove", "rmdir", "fsync")


def crash_point(name: str) -> None:
    """Die here, at once, when `MINIGPT_KILL_AT` names this point; wait here when `MINIGPT_PAUSE_AT` does."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_AT)
    if pause is not None and pause.partition("=")[0] == name:
        _pause(name, Path(pause.partition("=")[2]))


def _pause(name: str, folder: Path) -> None:
    (folder / f"{name}.paused").write_text(str(os.getpid()))
    give_up = time.monotonic() + PAUSE_LIMIT_S
    while not (folder / f"{name}.go").exists() and time.monotonic() < give_up:
        time.sleep(0.01)


def _path_of(args: tuple, kwargs: dict) -> str | None:
    """The path an os call acts on (its first argument; a descriptor through /proc), absolute."""
    first = args[0] if args else None
    if first is None:
        return None
    try:
        if isinstance(first, int):
            return os.readlink(f"/proc/self/fd/{first}")
        dir_fd = kwargs.get("dir_fd") or kwargs.get("src_dir_fd")
        if dir_fd is not None:
            return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fsdecode(first))
        path = os.path.abspath(os.fsdecode(first))
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
    except (OSError, TypeError):
        return None


def _counting(op: str, fn: Callable, under: str, kill_at: int | None, log: str | None) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        path = _path_of(args, kwargs)
        if path is not None and (path == under or path.startswith(under + os.sep)):
            _count[0] += 1
            if log is not None:
                with open(log, "a", encoding="utf-8") as fh:
                    fh.write(f"{_count[0]} {op} {os.path.relpath(path, under)}\n")
            if _count[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)

    return wrapper


_count = [0]


def _install_file_op_counter() -> None:
    """Wrap `os`'s file operations when a test asked for them to be counted or killed at (never otherwise)."""
    kill = os.environ.get(KILL_AT, "")
    log = os.environ.get(FILE_OPS_LOG)
    if not kill.startswith(FILE_OP) and log is None:
        return
    under = os.path.realpath(os.environ.get(FILE_OPS_UNDER) or os.getcwd())
    kill_at = int(kill[len(FILE_OP) :]) if kill.startswith(FILE_OP) else None
    for op in FILE_OPS:
        setattr(os, op, _counting(op, getattr(os, op), under, kill_at, log))


_install_file_op_counter()
