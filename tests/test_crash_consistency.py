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
