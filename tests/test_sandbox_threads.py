"""The child that runs a `--model`'s checks uses the checks' torch thread policy, as the in-process
checks do: with torch's default threads a busy machine made a tiny GPT-2's overfit 8x slower."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from minigpt.checks import CheckOptions, Status
from minigpt.checks.sandbox import run_checks_isolated
from minigpt.threads import USER_SETTINGS, recommended

TINYGPT = Path(__file__).parent / "fixtures" / "tinygpt.py"


@pytest.mark.slow
def test_the_check_child_runs_with_the_checks_thread_policy(tiny_workspace, config, tmp_path, monkeypatch):
    # GIVEN no thread setting of the user's, and a model that records the threads its forward runs with
    for name in USER_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    shutil.copy(TINYGPT, tmp_path / "tinygpt.py")
    seen = tmp_path / "threads.txt"
    model = tmp_path / "counting.py"
    model.write_text(
        "import torch\n"
        "from tinygpt import TinyGPT, TinyGPTConfig\n\n\n"
        "class CountsThreads(TinyGPT):\n"
        "    def forward(self, idx, targets=None):\n"
        f"        open({str(seen)!r}, 'w').write(str(torch.get_num_threads()))\n"
        "        return super().forward(idx, targets)\n\n\n"
        "CountsThreadsConfig = TinyGPTConfig\n"
    )
    opts = CheckOptions(
        workspace=tiny_workspace.root, model_spec=f"{model}:CountsThreads", config_path=config, device="cpu"
    )
    # WHEN a check runs in the child
    report = run_checks_isolated(opts, only=["forward_shapes"])
    # THEN its torch had the policy's one thread, not the machine's cores
    assert report.by_id()["forward_shapes"].status is Status.PASS
    assert seen.read_text() == str(recommended("checks")) == "1"
