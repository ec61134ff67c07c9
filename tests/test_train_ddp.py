"""Distributed training under torchrun (2 gloo processes on this CPU): one writer, per-rank batches,
exact resume at the same world size, a loss that follows the single-process run of the same global
batch, and checkpoints any reader loads. Plus the rank-0-only lock, in process."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import ConfigError, WorkspaceLockedError
from minigpt.io import lock
from minigpt.io.workspace import Workspace
from minigpt.logs.metrics import read_metrics
from minigpt.model.checkpoint import load_checkpoint, read_checkpoint
from minigpt.train import distributed
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
VOLATILE = {"time", "elapsed_s", "tokens_per_s"}
# a warmup longer than the run: the learning rate of step k does not depend on --steps, so a run
# stopped at 10 and resumed to 20 follows the schedule of a run of 20
SCHEDULE = ("--warmup-steps", "100", "--lr", "1e-2", "--eval-interval", "10", "--batch-size", "8")


def torchrun(ws: Workspace, *args: str, nproc: int = 2) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    cmd += ["-m", "minigpt", "train", "--workspace", str(ws.root), "--device", "cpu", "--quiet", *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def strip(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]


def _make_runs(tmp_path_factory, template) -> dict:
    runs = {}
    for name in ("a", "b"):
        root = tmp_path_factory.mktemp(f"ddp_{name}") / "ws"
        shutil.copytree(template, root)
        runs[name] = Workspace(root)
    ws_a, ws_b = runs["a"], runs["b"]
    # a previous run in A's workspace: exactly one rank may move it aside
    ws_a.metrics.parent.mkdir(parents=True, exist_ok=True)
    ws_a.metrics.write_text('{"step": 1, "train_loss": 9.0}\n', encoding="utf-8")
    runs["a_out"] = torchrun(ws_a, "--steps", "20", *SCHEDULE)
    torchrun(ws_b, "--steps", "10", *SCHEDULE)
    runs["b_out"] = torchrun(ws_b, "--steps", "20", "--resume")
    return runs


@pytest.fixture(scope="module")
def ddp_runs(tmp_path_factory, _workspace_template):
    """Run A: 20 steps on 2 ranks; run B: 10 steps on 2 ranks, then --resume to 20.

    Once in a full CI run on a loaded machine a gloo worker aborted ("terminate called without an
    active exception", SIGABRT) right after a checkpoint; it did not reproduce in 12 runs alone or
    next to busy processes; it came twice in a row once (2026-12-04, a full suite). A worker abort
    gets up to two fresh retries, each said in a warning; any other failure, or a third abort, fails."""
    import warnings

    for attempt in range(3):
        try:
            return _make_runs(tmp_path_factory, _workspace_template)
        except AssertionError as exc:
            if "SIGABRT" not in str(exc) or attempt == 2:
                raise
            warnings.warn(f"torchrun worker aborted, retrying on fresh workspaces: {str(exc)[-300:]}", stacklevel=1)
    raise AssertionError("unreachable")


@pytest.mark.slow
def test_ddp_run_logs_each_step_once_with_world_size_and_global_tokens(ddp_runs):
    ws = ddp_runs["a"]
    lines = read_lines(ws.metrics)
    assert [r["step"] for r in lines] == [10, 20]  # one writer: no line twice
    assert all(r["world_size"] == 2 for r in lines)
    assert all(math.isfinite(r["tokens_per_s"]) and r["tokens_per_s"] > 0 for r in lines)
    assert [r["step"] for r in read_lines(ws.grads)] == [10, 20]
    # only rank 0 archived: one folder holds the previous run, and nobody else wrote next to it
    archived = list((ws.root / "previous").iterdir())
    assert len(archived) == 1 and (archived[0] / "logs" / "metrics.jsonl").is_file()
    assert not lock.holder(ws.root)  # released at the end
    out = ddp_runs["a_out"]
    assert out.stderr.count("done: 20 steps") == 1, out.stderr[-2000:]  # rank 0 alone speaks


@pytest.mark.slow
def test_ddp_checkpoint_has_plain_keys_and_loads_like_any_other(ddp_runs):
    ws = ddp_runs["a"]
    raw = read_checkpoint(ws.latest_checkpoint)
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in raw["model_state_dict"])
    assert raw["world_size"] == 2 and len(raw["rng_states"]) == 2
    # each rank drew its own batches: their generators have diverged
    assert not torch.equal(raw["rng_states"][0]["batch"], raw["rng_states"][1]["batch"])
    ckpt = load_checkpoint(ws.latest_checkpoint, tokenizer=CharTokenizer.from_file(ws.tokenizer))
    assert ckpt.step == 20 and ckpt.fingerprint_mismatch is None
    # the reader the UI and the checks use sees an ordinary log
    log = read_metrics(ws.metrics)
    assert [p.step for p in log.points] == [10, 20] and log.bad_lines == 0
    assert all(p.val_loss is not None and p.tokens_per_s for p in log.points)


@pytest.mark.slow
def test_ddp_resume_at_the_same_world_size_is_exact(ddp_runs):
    ws_a, ws_b = ddp_runs["a"], ddp_runs["b"]
    assert strip(read_lines(ws_b.metrics)) == strip(read_lines(ws_a.metrics))
    sd_a = read_checkpoint(ws_a.latest_checkpoint)["model_state_dict"]
    sd_b = read_checkpoint(ws_b.latest_checkpoint)["model_state_dict"]
    for name in sd_a:
        assert torch.equal(sd_a[name], sd_b[name]), name
    assert "resuming at step 10 of 20" in ddp_runs["b_out"].stderr


@pytest.mark.slow
def test_ddp_loss_follows_the_single_process_run_with_the_same_global_batch(ddp_runs, tmp_path, _workspace_template):
    # GIVEN one process with batch 16 = 2 ranks x 8, on the same schedule
    shutil.copytree(_workspace_template, tmp_path / "ws")
    ws = Workspace(tmp_path / "ws")
    cfg = TrainConfig.from_preset(
        "debug", device="cpu", max_steps=20, warmup_steps=100, learning_rate=1e-2, eval_interval=10, batch_size=16
    )
    Trainer(ws, cfg).run()
    single = {r["step"]: r for r in read_lines(ws.metrics)}
    ddp = {r["step"]: r for r in read_lines(ddp_runs["a"].metrics)}
    vocab = CharTokenizer.from_file(ws.tokenizer).vocab_size
    # THEN both learned (well below the uniform loss) and agree within batch noise
    assert ddp[20]["val_loss"] < math.log(vocab) - 0.8
    for step in (10, 20):
        assert abs(ddp[step]["val_loss"] - single[step]["val_loss"]) < 0.1, (step, ddp[step], single[step])


@pytest.mark.slow
def test_a_two_rank_checkpoint_resumes_in_one_process_with_a_notice(ddp_runs, tmp_path):
    shutil.copytree(ddp_runs["a"].root, tmp_path / "ws")
    ws = Workspace(tmp_path / "ws")
    notices: list[str] = []
    trainer = Trainer(ws, TrainConfig.from_preset("debug", device="cpu"), resume=True, overrides={"max_steps": 30})
    trainer.register_callback("on_notice", notices.append)
    summary = trainer.run()
    assert summary["steps"] == 30
    assert any("2 process(es)" in n and "this run has 1" in n for n in notices), notices
    assert [r["step"] for r in read_lines(ws.metrics)] == [10, 20, 30]
    assert read_lines(ws.metrics)[-1]["world_size"] == 1


def test_only_rank_0_takes_the_workspace_lock(tiny_workspace):
    # GIVEN another process's lock on the workspace
    with lock.acquire(tiny_workspace.root, "someone else"):
        cfg = TrainConfig.from_preset("debug", device="cpu")
        rank0, rank1 = Trainer(tiny_workspace, cfg), Trainer(tiny_workspace, cfg)
        rank0.world = distributed.World(rank=0, size=2)
        rank1.world = distributed.World(rank=1, local_rank=1, size=2)
        # THEN rank 1 goes through without it, rank 0 is refused
        with rank1._workspace_lock() as notices:
            assert notices == []
        with pytest.raises(WorkspaceLockedError), rank0._workspace_lock():
            pass


def test_world_comes_from_torchruns_environment(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert distributed.from_env() == distributed.World()
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    world = distributed.from_env()
    assert (world.rank, world.local_rank, world.size, world.is_main, world.distributed) == (3, 1, 4, False, True)
    assert distributed.device_for(torch.device("cuda"), world) == torch.device("cuda", 1)
    assert distributed.device_for(torch.device("cpu"), world) == torch.device("cpu")
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ConfigError, match="RANK=4 and WORLD_SIZE=4"):
        distributed.from_env()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ConfigError, match="RANK='x'"):
        distributed.from_env()
