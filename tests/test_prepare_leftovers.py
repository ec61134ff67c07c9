"""`prepare` removes the temporary files that a killed prepare (or any killed atomic write) left in
the folders it writes, and says so; those of a writer still alive are left alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from minigpt.data.prepare import prepare_workspace
from minigpt.io.atomic import staged_open
from minigpt.io.workspace import Workspace

HOST = socket.gethostname().split(".")[0]


def leftover(folder: Path, name: str, pid: int) -> Path:
    """A temp file as `staged_open` names them (`.NAME.PID@HOST.RANDOM.tmp`), of process `pid`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f".{name}.{pid}@{HOST}.k3j9x2.tmp"
    path.write_bytes(b"x" * 1000)
    return path


def test_staged_writes_name_their_process(tmp_path):
    with staged_open(tmp_path / "f.json", "w") as staged:
        assert Path(staged.tmp).name.startswith(f".f.json.{os.getpid()}@{HOST}.")
        staged.discard()


def test_prepare_removes_temp_files_of_a_dead_process_and_keeps_a_live_ones(tmp_path):
    ws = Workspace(tmp_path / "ws")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = leftover(ws.ids("train").parent, "train_ids.pt", dead.pid)
        kept = leftover(ws.tokenizer.parent, "char_tokenizer.json", alive.pid)
        summary = prepare_workspace("demo", ws)
    finally:
        alive.kill()
        alive.wait()
    assert not gone.exists() and kept.exists()
    assert any(f"PID {dead.pid}" in n and str(gone) in n for n in summary.notices)


def test_check_removes_temp_files_of_a_dead_prepare_and_says_so(tiny_workspace):
    from minigpt.checks import CheckContext, CheckOptions, run_checks

    # GIVEN what a killed prepare left beside the token IDs, and a live writer's temp file
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        gone = leftover(tiny_workspace.ids("train").parent, "train_ids.pt", dead.pid)
        kept = leftover(tiny_workspace.tokenizer.parent, "char_tokenizer.json", alive.pid)
        opts = CheckOptions(workspace=tiny_workspace.root, device="cpu", skip_overfit=True)
        result = run_checks(CheckContext(opts), only=["files"]).by_id()["files"]
    finally:
        alive.kill()
        alive.wait()
    # THEN the check removed the dead one's file, kept the live one's, and names what it removed
    assert not gone.exists() and kept.exists()
    assert str(gone) in result.summary and f"PID {dead.pid}" in result.summary
    assert result.values["removed_leftovers"] and str(gone) in result.values["removed_leftovers"][0]
