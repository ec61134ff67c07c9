"""A process killed (SIGKILL) between any two writes of a multi-file update leaves a workspace
that `--resume` and `sample` read correctly: `best` is never older than the evaluation that made
it the best, and resuming finishes the run. The kills come from `MINIGPT_KILL_AT` (crash_points)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.io.crash_points import KILL_AT
from minigpt.model.checkpoint import read_checkpoint

REPO = Path(__file__).resolve().parents[1]


def minigpt_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "minigpt", *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.mark.slow
@pytest.mark.parametrize("point", ["eval-logged", "latest-saved", "best-saved"])
def test_a_kill_between_the_checkpoint_writes_never_leaves_a_stale_best(trained_workspace, point):
    # GIVEN a run at step 120 whose evaluation at 160 improves the validation loss
    ws = trained_workspace
    root = str(ws.root)
    # WHEN the process is killed at `point` of the evaluation at step 160
    killed = minigpt_cli("train", "--workspace", root, "--resume", "--steps", "160", "--quiet", env={KILL_AT: point})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # THEN best is at least as good as the best that latest has seen (never an older evaluation)
    latest, best = read_checkpoint(ws.latest_checkpoint), read_checkpoint(ws.best_checkpoint)
    assert best["best_val_loss"] <= latest["best_val_loss"]
    # AND resuming finishes the run, with best from the evaluation at 160
    resumed = minigpt_cli("train", "--workspace", root, "--resume", "--steps", "160", "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    latest, best = read_checkpoint(ws.latest_checkpoint), read_checkpoint(ws.best_checkpoint)
    assert latest["step"] == 160 and best["step"] == 160
    assert best["best_val_loss"] == latest["best_val_loss"]
    sampled = minigpt_cli("sample", "--workspace", root, "--max-new-tokens", "5", "--seed", "1")
    assert sampled.returncode == 0, sampled.stderr


@pytest.mark.slow
def test_a_kill_between_the_first_two_saves_of_a_fresh_run_leaves_best_to_sample_and_says_why_resume_cannot(
    tiny_workspace,
):
    ws = tiny_workspace
    root = str(ws.root)
    fresh = ("train", "--workspace", root, "--steps", "4", "--eval-interval", "2", "--quiet")
    killed = minigpt_cli(*fresh, env={KILL_AT: "best-saved"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert ws.best_checkpoint.is_file() and not ws.latest_checkpoint.exists()
    resumed = minigpt_cli("train", "--workspace", root, "--resume", "--quiet")
    assert resumed.returncode == 2 and "stopped between its first two saves" in resumed.stderr
    assert "Traceback" not in resumed.stderr
    sampled = minigpt_cli("sample", "--workspace", root, "--max-new-tokens", "5", "--seed", "1")
    assert sampled.returncode == 0, sampled.stderr


def test_a_resume_after_a_kill_that_left_the_archive_complete_never_writes_into_the_archive(trained_workspace):
    # GIVEN a fresh run killed right after previous/<time>/ appeared: the old run's files are
    # still in place, and the archive holds them as hard links (the same files)
    ws = trained_workspace
    archiving = (
        "from minigpt.io.workspace import Workspace, archive_run; ws = Workspace('.'); archive_run(ws, ws.run_files())"
    )
    killed = subprocess.run(
        [sys.executable, "-c", archiving],
        cwd=ws.root,
        env={**os.environ, "PYTHONPATH": str(REPO), KILL_AT: "archive-complete"},
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (archive,) = (ws.root / "previous").iterdir()
    archived = {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()}
    assert ws.metrics.stat().st_nlink == 2
    # WHEN the old run is resumed
    code = main(["train", "--workspace", str(ws.root), "--resume", "--steps", "125", "--quiet"])
    # THEN it trains on in its own files, and the archive keeps what it held
    assert code == 0
    assert {p: p.read_bytes() for p in archive.rglob("*") if p.is_file()} == archived
    assert b'"step":125' in ws.metrics.read_bytes()
