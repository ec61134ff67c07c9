"""A closed or broken standard output ends `minigpt` quietly with the status shells expect: 141
(128 + SIGPIPE, as `yes | head`) when the reader went away, and no traceback when stdout was
closed before the start (`>&-`: what would be printed goes nowhere, as with >/dev/null)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def read_one_byte_then_go(*args: str) -> tuple[int, str]:
    """`minigpt ARGS | head -c 1`: the reader takes one byte and closes the pipe."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "minigpt", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(1)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


def reader_already_gone(*args: str) -> tuple[int, str]:
    """`minigpt ARGS` writing into a pipe whose reader has gone. Output that fits the pipe's buffer
    (`check --list`) can be written whole before a reader that takes a byte and leaves gets to run,
    so the reader leaves first here: the first write fails, whatever the load."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "minigpt", *args], stdout=write_end, stderr=subprocess.PIPE, env=ENV, timeout=120
        )
    finally:
        os.close(write_end)
    return proc.returncode, proc.stderr.decode()


@pytest.mark.slow
def test_check_into_a_pipe_whose_reader_left_exits_141_quietly(tiny_workspace):
    code, err = reader_already_gone("check", "--workspace", str(tiny_workspace.root), "--list")
    assert code == 141 and err == ""


@pytest.mark.slow
def test_sample_into_a_pipe_whose_reader_left_exits_141_quietly(trained_workspace):
    args = ("sample", "--workspace", str(trained_workspace.root), "--max-new-tokens", "3000")
    code, err = read_one_byte_then_go(*args)
    assert code == 141 and "Traceback" not in err and "error" not in err


@pytest.mark.slow
def test_sample_with_stdout_closed_ends_without_a_traceback(trained_workspace):
    args = ("sample", "--workspace", str(trained_workspace.root), "--max-new-tokens", "20")
    proc = subprocess.run(
        [sys.executable, "-m", "minigpt", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=lambda: os.close(1),  # as `minigpt sample >&-` starts it
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
