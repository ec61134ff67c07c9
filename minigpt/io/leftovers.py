"""Temporary files that a killed writer left behind, found by the PID and host in their names.

`staged_open` names its temporary files `.NAME.PID@HOST.RANDOM.tmp`: a writer killed mid-write
(SIGKILL skips every cleanup) leaves one, and a later command removes it once that process is gone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable
from pathlib import Path

from minigpt.io.atomic import temp_host
from minigpt.io.files import describe_size

_TEMP_NAME = re.compile(r"^\..+\.(\d+)@([^.]*)\.[^.]+\.tmp$")  # staged_open's `.NAME.PID@HOST.RANDOM.tmp`


def remove_dead_temp_files(folders: Iterable[Path], *, keep: Collection[Path] = (), prefix: str = ".") -> list[str]:
    """Remove the temporary files of `staged_open` in `folders` whose writer, a process on this
    machine, is gone (killed mid-write: SIGKILL skips the cleanup); one notice per file removed.
    A writer alive, on another machine, a name without a PID, or a file in `keep` (one that an
    update journal names: `commit.journaled_temps`): the file is kept. Only names that start with
    `prefix` are looked at."""
    notices: list[str] = []
    host = temp_host()
    kept = {os.path.abspath(p) for p in keep}
    for folder in folders:
        try:
            names = sorted(p for p in folder.iterdir() if p.name.startswith(prefix) and p.name.endswith(".tmp"))
        except OSError:  # absent, not a folder, unreadable: nothing of ours to clean
            continue
        for path in names:
            found = _TEMP_NAME.match(path.name)
            if found is None or found.group(2) != host or _pid_alive(int(found.group(1))):
                continue
            if os.path.abspath(path) in kept:
                continue
            try:
                size = path.lstat().st_size
                path.unlink()
            except OSError:
                continue
            notices.append(
                f"removed {path} ({describe_size(size)}), left by PID {found.group(1)}, which is gone: it was "
                "stopped before it put that file in place"
            )
    return notices


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True
