"""`minigpt train` ended by SIGTERM (a scheduler's preemption, `timeout`): it stops after the step
in progress with that step saved, says so, and exits 143; before, it died at once with no save."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.model.checkpoint import read_checkpoint
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_sigterm_saves_the_step_in_progress_and_exits_143(tiny_workspace):
    # GIVEN a long run in its own process, well past its first logged steps
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "minigpt", "train", "--workspace", str(tiny_workspace.root), "--preset", "debug"]
    cmd += ["--steps", "100000", "--eval-interval", "100000", "--device", "cpu"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        wait_for(
            lambda: tiny_workspace.metrics.is_file() and len(tiny_workspace.metrics.read_text().splitlines()) >= 3,
            what="three logged steps",
        )
        # WHEN the scheduler sends SIGTERM
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    # THEN it exits 143 naming the step it stopped at, and that step's checkpoint is on disk
    assert proc.returncode == 128 + signal.SIGTERM, out
    line = next(line for line in out.splitlines() if "stopped by SIGTERM at step" in line)
    step = int(line.split("stopped by SIGTERM at step ")[1].split(";")[0])
    assert "use --resume" in line
    assert read_checkpoint(tiny_workspace.latest_checkpoint)["step"] == step
    last = json.loads(tiny_workspace.metrics.read_text().splitlines()[-1])
    assert last["step"] == step
