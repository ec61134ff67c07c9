"""User code cannot outlive or stall a check: the sandbox runs the model in its own process group,
kills the group when the check ends, notices a dead child even when a grandchild holds its pipe,
and keeps a bounded tail of its stderr. Real processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.checks.sandbox import STDERR_KEEP, _StderrTail
from tests.waiting import eventually_sync, wait_for

CHILDREN = Path(__file__).parent / "fixtures" / "hostile_children.py"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent, the dead check child, is reaped by init)
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _check(ws, cls, config, tmp_path, *extra):
    report, pidfile = tmp_path / "report.json", tmp_path / "pids.txt"
    cmd = [sys.executable, "-m", "minigpt", "check", "--workspace", str(ws.root), "--model", f"{CHILDREN}:{cls}"]
    cmd += ["--config", str(config), "--skip-overfit", "--device", "cpu", "--json", str(report), *extra]
    env = {**os.environ, "MINIGPT_TEST_PIDFILE": str(pidfile), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=env)
    pids = [int(line) for line in pidfile.read_text().split()] if pidfile.exists() else []
    return proc, json.loads(report.read_text()) if report.exists() else None, pids


@pytest.mark.slow
def test_processes_the_model_starts_do_not_outlive_the_check(tiny_workspace, config, tmp_path):
    proc, report, pids = _check(tiny_workspace, "SpawnsGPT", config, tmp_path, "--only", "forward_shapes")
    assert report is not None, proc.stderr
    assert pids, "the model started no process: the fixture is broken"

    def gone() -> None:
        assert [pid for pid in pids if _alive(pid)] == []

    eventually_sync(gone)  # a killed process may take a moment to be reaped


@pytest.mark.slow
def test_a_child_that_dies_while_a_grandchild_holds_the_pipe_is_noticed_at_once(tiny_workspace, config, tmp_path):
    # GIVEN a model that starts a process inheriting the event pipe, then calls os._exit(0)
    # WHEN the checks run with a budget far longer than the test's own wait
    proc, report, pids = _check(tiny_workspace, "ExitsWithGrandchildGPT", config, tmp_path, "--check-timeout", "300")
    # THEN the check is an error naming the exit (not "no result after 300 s"), and the others ran
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["id"]: c for c in report["checks"]}
    assert "exited with code 0 during forward_shapes" in checks["forward_shapes"]["summary"]
    assert checks["sampler_settings"]["status"] == "pass"
    assert pids and not any(_alive(pid) for pid in pids)


@pytest.mark.slow
def test_a_model_that_floods_stderr_is_quoted_by_its_last_words(tiny_workspace, config, tmp_path):
    proc, report, _ = _check(tiny_workspace, "FloodsStderrGPT", config, tmp_path, "--only", "forward_shapes")
    checks = {c["id"]: c for c in report["checks"]}
    assert "exited with code 3" in checks["forward_shapes"]["summary"]
    assert any("the last words of the model" in c for c in checks["forward_shapes"]["causes"])


def test_the_stderr_tail_keeps_a_bounded_buffer_of_a_200_mb_stream(tmp_path):
    # a real process writes 200 MB into the pipe; the reader keeps at most 2 x STDERR_KEEP bytes
    read_fd, write_fd = os.pipe()
    writer = subprocess.Popen(
        [sys.executable, "-c", "import os\nfor _ in range(200): os.write(1, b'y' * (1 << 20))\nos.write(1, b'END')"],
        stdout=write_fd,
    )
    os.close(write_fd)
    tail = _StderrTail(read_fd)
    writer.wait(timeout=120)
    wait_for(lambda: tail.text().endswith("END"), what="the tail to read the stream's end")
    assert tail.text(limit=10) == "yyyyyyyEND"
    assert len(tail._data) <= 2 * STDERR_KEEP
