"""Moving a run to previous/ when `logs/`, `checkpoints/` or `previous/` are links onto another
file system (a scratch disk, a tmpfs): all or nothing. A folder that was only moved and linked back
is still the workspace's own, not "another workspace"."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.errors import FileSystemError
from minigpt.io.crash_points import KILL_AT
from minigpt.io.lock import acquire
from minigpt.io.workspace import Workspace, archive_run

REPO = Path(__file__).resolve().parents[1]


def run_files(ws: Workspace) -> dict[str, bytes]:
    return {str(p.relative_to(ws.root)): p.read_bytes() for p in ws.run_files() if p.is_file()}


def link_folder_onto(ws: Workspace, name: str, elsewhere: Path) -> None:
    """Move `<ws>/<name>` to `elsewhere/<name>` and leave a link in its place (as on GPU boxes)."""
    target = elsewhere / name
    shutil.move(str(ws.root / name), str(target))
    (ws.root / name).symlink_to(target)


def test_logs_on_another_file_system_are_copied_into_previous_with_the_checkpoints(trained_workspace, tmpfs):
    ws = trained_workspace
    link_folder_onto(ws, "logs", tmpfs("size=8m"))
    before = run_files(ws)
    dest = archive_run(ws, ws.run_files())
    assert dest is not None
    moved = {name: (dest / name).read_bytes() for name in before}
    assert moved == before
    assert run_files(ws) == {}  # every source went, once its copy was complete


def test_a_previous_folder_too_small_for_the_copy_moves_nothing(trained_workspace, tmpfs):
    ws = trained_workspace
    small = tmpfs("size=16k")  # smaller than a checkpoint
    (ws.root / "previous").symlink_to(small)
    before = run_files(ws)
    with pytest.raises(FileSystemError, match="nothing was moved") as info:
        archive_run(ws, ws.run_files())
    assert "Disk full" in str(info.value)
    assert run_files(ws) == before  # every file where it was, byte for byte
    assert not [p for p in small.rglob("*") if p.is_file()]  # no partial copy left behind


def test_a_fresh_run_with_its_logs_on_a_tmpfs_archives_the_old_run_and_trains(trained_workspace, tmpfs, capsys):
    ws = trained_workspace
    link_folder_onto(ws, "logs", tmpfs("size=8m"))
    before = run_files(ws)
    assert main(["train", "--workspace", str(ws.root), "--steps", "2", "--eval-interval", "2", "--quiet"]) == 0
    (dest,) = (ws.root / "previous").iterdir()
    assert {name: (dest / name).read_bytes() for name in before} == before
    assert ws.latest_checkpoint.is_file() and (ws.root / "logs").is_symlink()


def test_a_checkpoints_folder_moved_and_linked_back_is_still_the_workspaces_own(trained_workspace, tmp_path):
    ws = trained_workspace
    store = tmp_path / "store"
    store.mkdir()
    link_folder_onto(ws, "checkpoints", store)  # store/checkpoints/mini_gpt_latest.pt looks like a workspace
    with acquire(ws.root, command="train") as held:
        assert held.holder.command == "train"


@pytest.mark.slow
@pytest.mark.parametrize("point", ["archive-staged", "archive-complete"])
def test_a_kill_while_archiving_loses_nothing_and_the_next_run_archives_whole(trained_workspace, tmpfs, point):
    # GIVEN a trained run whose logs/ lie on another file system
    ws = trained_workspace
    link_folder_onto(ws, "logs", tmpfs("size=8m"))
    before = run_files(ws)
    fresh = ("train", "--workspace", str(ws.root), "--steps", "2", "--eval-interval", "2", "--quiet")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # WHEN a fresh run is killed in the middle of moving the old run to previous/
    killed = subprocess.run(
        [sys.executable, "-m", "minigpt", *fresh], env={**env, KILL_AT: point}, capture_output=True, timeout=300
    )
    assert killed.returncode == -signal.SIGKILL
    # THEN every file of the old run is still where it was, byte for byte (--resume still works)
    assert run_files(ws) == before
    # AND the next fresh run archives the whole old run and leaves no partial folder
    done = subprocess.run([sys.executable, "-m", "minigpt", *fresh], env=env, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr
    folders = sorted((ws.root / "previous").iterdir())
    assert not [f for f in folders if f.name.endswith(".partial")]
    assert {name: (folders[-1] / name).read_bytes() for name in before} == before
