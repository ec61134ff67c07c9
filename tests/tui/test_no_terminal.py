"""`minigpt-tui` without a terminal (cron, `</dev/null >out`, a pipe) says it needs one and exits 2
at once, instead of drawing into a file and waiting for keys that never come."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_without_a_terminal_it_says_so_and_exits_2(tmp_path):
    out = tmp_path / "out"
    with open(out, "wb") as sink, open(os.devnull, "rb") as nothing:
        proc = subprocess.run(
            [sys.executable, "-m", "minigpt_tui", "--workspace", str(tmp_path)],
            stdin=nothing,
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=60,
        )
    assert proc.returncode == 2
    assert "needs a terminal" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_bytes() == b""
