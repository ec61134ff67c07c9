"""Shared fixtures: a real (small) workspace built without `minigpt prepare`, seeded torch."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings

from minigpt.data.tokenizer import CharTokenizer
from minigpt.io.atomic import atomic_torch_save
from minigpt.io.workspace import Workspace

SLOW_LEFT_OUT = pytest.StashKey[int]()

# property tests draw the same examples every run (a seed from each test's name), so a run of the
# suite is repeatable and CI never meets an example no run before it met; `HYPOTHESIS_PROFILE=explore`
# draws new ones (and more of them) to look for what the fixed ones miss
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", help="run the slow tier too (tests marked slow)")


def pytest_collection_modifyitems(config, items):
    """The default tier leaves out tests marked `slow`; `--full` runs them, and so does naming a
    test (`FILE::TEST`): asking for one test by name runs it whatever its tier."""
    named = any("::" in arg for arg in config.args)
    if config.getoption("--full") or named:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        items[:] = [item for item in items if not item.get_closest_marker("slow")]
        config.hook.pytest_deselected(items=slow)
    config.stash[SLOW_LEFT_OUT] = len(slow)


def _order_line(config) -> str | None:
    """How to repeat this run's test order (pytest-randomly's seed), or None when the order is fixed."""
    seed = config.getoption("randomly_seed", None)
    if not isinstance(seed, int) or not config.pluginmanager.hasplugin("randomly"):
        return None
    return f"test order: --randomly-seed={seed} (add it to the command to repeat this order)"


def pytest_sessionstart(session):
    # pytest-randomly names its seed in the report header, which `-q` hides: say it here too, first,
    # so a run that hangs or is killed still tells how to repeat its order
    line = _order_line(session.config)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None and session.config.get_verbosity() < 0:
        reporter.write_line(line)


def pytest_terminal_summary(terminalreporter, config):
    left_out = config.stash.get(SLOW_LEFT_OUT, 0)
    if left_out:
        terminalreporter.write_line(f"{left_out} slow tests left out of this tier: `python -m pytest --full` runs them")
    line = _order_line(config)
    if line:
        terminalreporter.write_line(line)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # every test starts from the same seeds and one torch thread, whatever ran before it and in
    # whatever order: a result never depends on the order, the load or the core count
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    torch.set_num_threads(1)


def pytest_configure(config):
    # `nohup pytest &` or `trap '' INT` start the suite with SIGINT ignored, and every process it
    # starts inherits that: tests that send SIGINT (to a trainer, to themselves) then wait forever.
    # The tests own their signals: Python's handler here, so the default in each child (exec resets
    # a handled signal, not an ignored one).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


WIKITEXT2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2"
PROSE_CHARS = 200_000


def english_prose(n_chars: int = PROSE_CHARS) -> str:
    """Real English prose that ships with CPython: the pydoc topic help texts."""
    from pydoc_data.topics import topics

    return "".join(topics[key] for key in sorted(topics))[:n_chars]


def build_workspace(root: Path, text: str) -> Workspace:
    ws = Workspace(root)
    tokenizer = CharTokenizer.from_text(text)
    tokenizer.save(ws.tokenizer)
    ids = torch.tensor(tokenizer.encode(text), dtype=torch.int64)
    n_train, n_val = int(len(ids) * 0.90), int(len(ids) * 0.05)
    splits = {"train": ids[:n_train], "val": ids[n_train : n_train + n_val], "test": ids[n_train + n_val :]}
    for split, part in splits.items():
        atomic_torch_save(part.clone(), ws.ids(split))
    return ws


@pytest.fixture(scope="session")
def _workspace_template(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("workspace_template")
    build_workspace(root, english_prose())
    return root


@pytest.fixture
def tiny_workspace(tmp_path, _workspace_template) -> Workspace:
    """A fresh copy of a prepared workspace (tokenizer + train/val/test IDs) per test."""
    root = tmp_path / "ws"
    shutil.copytree(_workspace_template, root)
    return Workspace(root)


@pytest.fixture
def wikitext_dir() -> Path:
    if not WIKITEXT2.is_dir():
        pytest.skip(f"WikiText-2 not found at {WIKITEXT2}")
    return WIKITEXT2


@pytest.fixture(scope="session")
def _trained_template(tmp_path_factory, _workspace_template) -> Path:
    from minigpt.train.config import TrainConfig
    from minigpt.train.trainer import Trainer

    root = tmp_path_factory.mktemp("trained") / "ws"
    shutil.copytree(_workspace_template, root)
    cfg = TrainConfig.from_preset("debug", max_steps=120, eval_interval=40, device="cpu")
    Trainer(root, cfg).run()
    return root


@pytest.fixture
def trained_workspace(tmp_path, _trained_template) -> Workspace:
    """A copy of a workspace with a short debug training run: checkpoints and metrics.jsonl."""
    root = tmp_path / "trained"
    shutil.copytree(_trained_template, root)
    return Workspace(root)


SANDBOX_SHAPE = {"block_size": 32, "n_embd": 64, "n_head": 4, "n_layer": 2, "dropout": 0.0}


@pytest.fixture
def config(tiny_workspace, tmp_path) -> Path:
    """A --config JSON of the debug shape in nanoGPT's field names, for the tiny workspace's vocabulary."""
    from minigpt.data.tokenizer import CharTokenizer

    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"vocab_size": CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size, **SANDBOX_SHAPE})
    )
    return path


@pytest.fixture
def tmpfs(tmp_path):
    """`tmpfs("size=64k")` mounts a small real tmpfs with those options (needs root); skips where the
    machine does not allow it; unmounted after the test."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0 or shutil.which("mount") is None:
            pytest.skip("mounting a tmpfs needs root")
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


@pytest.fixture
def user_config(config) -> Path:
    """`config` under the name the tests of tests/fixtures/tinygpt.py's classes use: the same shape."""
    return config
