"""The app on the newest Textual 8.x as well as the pinned one (pyproject: `textual>=8.2,<9`).

Slow tier: pip puts the newest `textual<9` (and what it needs) into a temporary folder that goes
first on the path of a child pytest, which runs the TUI tests there; the snapshot tests skip
themselves on a version other than the pinned one, and the slow ones stay out (the child runs the
default tier). Skips when pip cannot reach an index, and when the newest 8.x is the version this
suite already runs on (the default tier tests it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import textual

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_tui_tests_pass_on_the_newest_textual_8(tmp_path):
    # GIVEN the newest textual 8.x from the index, in a folder of its own
    target = tmp_path / "textual-newest"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-input", "--target", str(target), "textual<9"]
    try:
        got = subprocess.run(pip, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.skip("pip took over 5 minutes to install textual<9 (no index within reach?)")
    if got.returncode != 0:
        pytest.skip(f"pip could not install textual<9 (no index within reach?): {got.stderr.strip()[-300:]}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(target), os.environ.get("PYTHONPATH")]))}
    probe = [sys.executable, "-c", "import textual; print(textual.__version__)"]
    newest = subprocess.run(probe, capture_output=True, text=True, env=env, cwd=REPO, check=True).stdout.strip()
    assert newest.startswith("8."), newest
    if newest == textual.__version__:
        pytest.skip(f"the newest textual 8.x is {newest}, the version this suite runs on")

    # WHEN the TUI tests run on it (the default tier: no slow tests, snapshots skip themselves)
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/tui"]
    done = subprocess.run(tests, capture_output=True, text=True, env=env, cwd=REPO, timeout=1200)

    # THEN they pass
    assert done.returncode == 0, f"TUI tests on textual {newest}:\n{done.stdout[-4000:]}\n{done.stderr[-2000:]}"
