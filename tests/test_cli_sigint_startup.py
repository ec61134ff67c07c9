"""Ctrl-C at any moment of `minigpt train`'s start (imports, tokenizer, model build, first steps)
ends it with exit 130 and the "interrupted" line: never a traceback, an abort or a finished run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# after the interpreter's own start (site imports, before any minigpt code runs), to the first steps
_RNG = random.Random(36)
# seconds after `minigpt.cli` finished importing (the entry point's first line): the command's
# imports, torch's C++ start, the tokenizer, the model build; one random moment in each 50 ms
AFTER_ENTRY = [0.0] + [round(0.05 * i + _RNG.uniform(0.0, 0.05), 3) for i in range(10)]
# seconds after the process started, to the first training steps
AFTER_START = sorted(round(_RNG.uniform(0.6, 3.0), 2) for _ in range(3))


def interrupt_train(workspace: Path, delay: float, *, from_entry: bool) -> tuple[int, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    # -X importtime writes a line to stderr as each import ends: the moment the entry module is in
    cmd = [sys.executable, "-X", "importtime", "-m", "minigpt", "train", "--workspace", str(workspace)]
    proc = subprocess.Popen(
        [*cmd, "--steps", "100000"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )
    assert proc.stderr is not None
    if from_entry:
        for line in proc.stderr:
            if line.rstrip().endswith("| minigpt.cli"):
                break
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"SIGINT at {delay} s: still running 120 s later")
    return proc.returncode, "\n".join(line for line in err.splitlines() if not line.startswith("import time:"))


def assert_interrupted(code: int, err: str, delay: float) -> None:
    # 130, or death by SIGINT (what a shell also reports as 130): CPython re-raises the signal at exit
    # when the interrupt landed in code torch's C++ ran through PyRun_String, though main handled it
    assert code in (130, -signal.SIGINT), f"SIGINT at {delay} s: exit {code}\n{err}"
    assert "interrupted" in err
    assert "Traceback" not in err and "Error" not in err and "done:" not in err


@pytest.mark.slow
@pytest.mark.parametrize("delay", AFTER_ENTRY)
def test_sigint_during_the_imports_and_the_model_build_exits_130_saying_interrupted(tiny_workspace, delay):
    assert_interrupted(*interrupt_train(tiny_workspace.root, delay, from_entry=True), delay)


@pytest.mark.slow
@pytest.mark.parametrize("delay", AFTER_START)
def test_sigint_at_any_moment_of_startup_exits_130_saying_interrupted(tiny_workspace, delay):
    assert_interrupted(*interrupt_train(tiny_workspace.root, delay, from_entry=False), delay)
