"""Hardening of `minigpt train` / `sample`: one writer per workspace, inputs checked before anything
moves, non-finite or mistyped checkpoints refused with the file and field named, memory estimated
before allocating, interrupts that lose nothing. Real files, real processes and real signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minigpt.cli import main
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import CheckpointError, ConfigError, DataError, ResourceError, WorkspaceLockedError
from minigpt.io import lock
from minigpt.io.atomic import atomic_torch_save
from minigpt.model.checkpoint import read_checkpoint
from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.model.memory import minigpt_numel
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]


def debug_config(**overrides) -> TrainConfig:
    return TrainConfig.from_preset("debug", **{"device": "cpu", "eval_batches": 2, **overrides})


def snapshot(ws) -> dict[str, bytes]:
    """Every file of the run (checkpoints and logs) with its bytes."""
    return {str(p.relative_to(ws.root)): p.read_bytes() for p in ws.root.rglob("*") if p.is_file()}


def train_cli(ws, *args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "minigpt", "train", "--workspace", str(ws.root), "--quiet", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def metric_steps(ws) -> list[int]:
    return [json.loads(line)["step"] for line in ws.metrics.read_text(encoding="utf-8").splitlines()]


# --- 1. one workspace, one writer ---


def test_holder_names_the_process_that_holds_the_lock_and_none_after_release(tmp_path):
    assert lock.holder(tmp_path) is None
    with lock.acquire(tmp_path) as held:
        found = lock.holder(tmp_path)
        assert found is not None and found.pid == os.getpid() and found == held.holder
        with pytest.raises(WorkspaceLockedError, match=f"PID {os.getpid()}") as info:
            lock.acquire(tmp_path)
        assert info.value.holder == held.holder
    assert lock.holder(tmp_path) is None
    lock.acquire(tmp_path).release()  # free again


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_notice(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record = {"pid": dead.pid, "host": os.uname().nodename, "started": time.time() - 60, "command": "train"}
    (tmp_path / lock.LOCK_NAME).write_text(json.dumps(record))
    assert lock.holder(tmp_path) is None
    with lock.acquire(tmp_path) as held:
        assert any(f"PID {dead.pid}" in n and "stale" in n for n in held.notices)


@pytest.mark.slow
def test_a_second_trainer_on_a_busy_workspace_exits_2_and_touches_nothing(trained_workspace):
    # GIVEN trainer A running a long fresh run on the workspace
    ws = trained_workspace
    a = train_cli(ws, "--steps", "100000", "--eval-interval", "20")
    try:
        # A has archived the trained run and saved its own first checkpoint
        wait_for(lambda: (ws.root / "previous").is_dir() and ws.latest_checkpoint.exists())
        assert lock.holder(ws.root).pid == a.pid
        archived_by_a = sorted((ws.root / "previous").iterdir())
        # WHEN trainer B starts a fresh run on the same workspace
        b = train_cli(ws, "--steps", "10")
        _, err_b = b.communicate(timeout=120)
        # THEN B exits 2 naming A, and moved nothing of A's
        assert b.returncode == 2, err_b
        assert f"PID {a.pid}" in err_b and "in use" in err_b and "Traceback" not in err_b
        assert sorted((ws.root / "previous").iterdir()) == archived_by_a
        assert a.poll() is None
    finally:
        a.send_signal(signal.SIGINT)
        _, err_a = a.communicate(timeout=120)
    assert a.returncode == 130 and "interrupted at step" in err_a and "Traceback" not in err_a
    assert lock.holder(ws.root) is None
    assert read_checkpoint(ws.latest_checkpoint)["step"] in metric_steps(ws)


# --- 2. data, vocabulary and config checked before a fresh run moves the previous one ---


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param(lambda ids, vocab: ids + vocab, id="dense_out_of_range"),
        pytest.param(lambda ids, vocab: torch.cat([ids, torch.tensor([vocab + 5])]), id="one_bad_id_at_the_end"),
        pytest.param(lambda ids, vocab: ids[:0], id="empty"),
        pytest.param(lambda ids, vocab: ids.float(), id="float_dtype"),
        pytest.param(lambda ids, vocab: torch.cat([torch.tensor([-1]), ids]), id="negative"),
    ],
)
def test_bad_training_ids_are_refused_before_the_previous_run_is_moved(trained_workspace, corrupt):
    ws = trained_workspace
    vocab = CharTokenizer.from_file(ws.tokenizer).vocab_size
    atomic_torch_save(corrupt(torch.load(ws.ids("train"), weights_only=True), vocab), ws.ids("train"))
    before = snapshot(ws)
    with pytest.raises(DataError) as info:
        Trainer(ws, debug_config(max_steps=10)).run()
    assert str(ws.ids("train")) in str(info.value)
    assert snapshot(ws) == before  # nothing archived, nothing rewritten
    assert not (ws.root / "previous").exists()


def test_out_of_range_ids_exit_2_from_the_cli_naming_the_file_and_range(trained_workspace, capsys):
    ws = trained_workspace
    ids = torch.load(ws.ids("val"), weights_only=True).clone()
    ids[100] = 9999
    atomic_torch_save(ids, ws.ids("val"))
    assert main(["train", "--workspace", str(ws.root), "--steps", "5", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(ws.ids("val")) in err and "max 9999" in err and "position 100" in err
    assert ws.latest_checkpoint.exists()


# --- 4. non-finite weights are never a good checkpoint ---


def poison(path: Path, name: str = "blocks.1.mlp.fc.weight") -> None:
    payload = torch.load(path, weights_only=True)
    payload["model_state_dict"][name][0, 0] = float("nan")
    atomic_torch_save(payload, path)


@pytest.mark.parametrize("temperature", ["1.0", "0"])
def test_sample_refuses_a_checkpoint_with_nan_weights(trained_workspace, capsys, temperature):
    ws = trained_workspace
    poison(ws.best_checkpoint)
    code = main(["sample", "--workspace", str(ws.root), "--temperature", temperature, "--max-new-tokens", "5"])
    captured = capsys.readouterr()
    assert code == 2
    assert str(ws.best_checkpoint) in captured.err and "blocks.1.mlp.fc.weight (1 NaN" in captured.err
    assert captured.out == ""


def test_resume_refuses_a_latest_checkpoint_with_nan_weights(trained_workspace):
    poison(trained_workspace.latest_checkpoint, "token_embedding.weight")
    before = snapshot(trained_workspace)
    with pytest.raises(CheckpointError, match="token_embedding.weight") as info:
        Trainer(trained_workspace, debug_config(), resume=True, overrides={"max_steps": 130}).run()
    assert "not finite" in str(info.value) and info.value.path == str(trained_workspace.latest_checkpoint)
    assert snapshot(trained_workspace) == before


# --- 6. resume on inputs `check` tolerates ---


def test_resume_moves_unreadable_metric_lines_aside_instead_of_deleting_them(trained_workspace):
    ws = trained_workspace
    bad = [b'{"step": "abc", "train_loss": 1.0}\n', b'{"step": null}\n', b"\xff\xfe not utf-8\n", b'{"step": 1']
    with open(ws.metrics, "ab") as fh:
        fh.writelines(bad)
    notices = []
    trainer = Trainer(ws, debug_config(), resume=True, overrides={"max_steps": 130})
    trainer.register_callback("on_notice", notices.append)
    trainer.run()
    rejected = ws.metrics.with_name("metrics.jsonl.rejected")
    assert rejected.read_bytes() == b"".join(bad) + b"\n"
    assert any("4 unreadable line(s)" in n and str(rejected) in n for n in notices)
    assert metric_steps(ws)[-3:] == [110, 120, 130]


def _edit(path: Path, edit) -> None:
    payload = torch.load(path, weights_only=True)
    edit(payload)
    atomic_torch_save(payload, path)


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("step", lambda p: p.update(step="120")),
        ("step", lambda p: p.update(step=-3)),
        ("rng_state", lambda p: p.update(rng_state=[1, 2])),
        ("rng_state.batch", lambda p: p["rng_state"].update(batch=torch.zeros(3))),
        ("train_config", lambda p: p.update(train_config=[1, 2])),
        ("train_config", lambda p: p["train_config"].update(warmup_steps="20")),
        ("train_config", lambda p: p["train_config"].update(eval_interval=2.5)),
        ("config", lambda p: p["config"].update(num_layers="2")),
        ("best_val_loss", lambda p: p.update(best_val_loss="low")),
        ("optimizer_state_dict", lambda p: p.update(optimizer_state_dict={"param_groups": []})),
        ("optimizer_state_dict.param_groups", lambda p: p["optimizer_state_dict"].update(param_groups=[1])),
        ("optimizer_state_dict", lambda p: p["optimizer_state_dict"]["param_groups"].pop()),
        ("optimizer_state_dict", lambda p: p["optimizer_state_dict"]["param_groups"][0].update(lr="fast")),
        ("optimizer_state_dict", lambda p: p["optimizer_state_dict"]["state"][0].update(exp_avg=torch.zeros(3))),
    ],
)
def test_resume_from_a_mistyped_checkpoint_is_a_typed_error_naming_the_field(trained_workspace, field, edit):
    _edit(trained_workspace.latest_checkpoint, edit)
    before = snapshot(trained_workspace)
    with pytest.raises(CheckpointError) as info:
        Trainer(trained_workspace, debug_config(), resume=True, overrides={"max_steps": 130}).run()
    assert field in str(info.value) and str(trained_workspace.latest_checkpoint) in str(info.value)
    assert snapshot(trained_workspace) == before


def test_mistyped_checkpoint_exits_2_without_a_traceback(trained_workspace, capsys):
    _edit(trained_workspace.latest_checkpoint, lambda p: p.update(step="x"))
    assert main(["train", "--workspace", str(trained_workspace.root), "--resume", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "'step'" in err and "Traceback" not in err


# --- 7. memory estimated before allocating ---


def test_parameter_estimate_matches_the_built_model():
    cfg = MiniGPTConfig(vocab_size=77, block_size=24, embedding_dim=48, num_heads=3, num_layers=3, expansion_factor=3)
    assert minigpt_numel(cfg) == MiniGPT(cfg).num_parameters()


@pytest.mark.parametrize("config", [{"num_layers": 10_000}, {"embedding_dim": 10**9, "num_heads": 1}])
def test_a_tiny_checkpoint_with_a_huge_config_is_refused_before_building(tmp_path, config, capsys):
    ws = tmp_path
    tok = CharTokenizer.from_text("abcdefgh \n")
    tok.save(ws / "tokenizer" / "char_tokenizer.json")
    cfg = dict(vocab_size=tok.vocab_size, block_size=8, embedding_dim=32, num_heads=2, num_layers=1, dropout=0.0)
    state = MiniGPT(MiniGPTConfig(**cfg)).state_dict()
    path = ws / "checkpoints" / "mini_gpt_best.pt"
    atomic_torch_save({"model_state_dict": state, "config": {**cfg, **config}, "step": 1}, path)
    assert path.stat().st_size < 100_000
    assert main(["sample", "--workspace", str(ws), "--max-new-tokens", "3"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "refused before building" in err


def test_a_fresh_run_too_large_for_memory_is_refused_naming_the_estimate(trained_workspace, capsys):
    before = snapshot(trained_workspace)
    code = main(["train", "--workspace", str(trained_workspace.root), "--batch-size", "100000000", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "would need about" in err and "GiB" in err and "--allow-large" in err
    assert snapshot(trained_workspace) == before
    with pytest.raises(ResourceError):
        Trainer(trained_workspace, debug_config(embedding_dim=2**15, num_layers=64)).run()


@pytest.mark.parametrize("bad", [{"num_layers": 2.0}, {"num_layers": "2"}, {"num_layers": -1}, {"dropout": "0.1"}])
def test_config_types_are_checked(bad):
    with pytest.raises(ConfigError):
        debug_config(**bad)


# --- 10. interrupts, orphans, lost lines, flags, nothing to do ---


@pytest.mark.slow
def test_sigint_during_a_run_exits_130_with_the_checkpoint_and_its_log_line_intact(tiny_workspace):
    ws = tiny_workspace
    proc = train_cli(ws, "--steps", "100000", "--eval-interval", "10")
    wait_for(lambda: ws.latest_checkpoint.exists() and len(metric_steps(ws)) >= 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and str(ws.latest_checkpoint) in err and "Traceback" not in err
    saved = read_checkpoint(ws.latest_checkpoint)["step"]
    evals = [json.loads(ln)["step"] for ln in ws.metrics.read_text().splitlines() if "val_loss" in json.loads(ln)]
    assert saved in evals and max(evals) - saved <= 10
    assert not list(ws.checkpoints.glob(".*.tmp"))


def test_sigint_arriving_inside_a_save_waits_for_the_save_and_its_log_line(tiny_workspace, monkeypatch):
    # GIVEN a real SIGINT delivered while the step-20 checkpoint is being written
    import minigpt.train.checkpoints as train_mod

    real_save = train_mod.save_checkpoint

    def save_with_sigint(path, payload):
        if payload["step"] == 20:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, mid-save
        real_save(path, payload)

    monkeypatch.setattr(train_mod, "save_checkpoint", save_with_sigint)
    # WHEN the run is interrupted
    trainer = Trainer(tiny_workspace, debug_config(max_steps=40, eval_interval=10))
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    # THEN the interrupt came after the checkpoint and its log line, both for step 20, and the run's
    # state (which `train`'s "interrupted … last checkpoint" line reads) names that checkpoint
    assert read_checkpoint(tiny_workspace.latest_checkpoint)["step"] == 20
    assert trainer.state is not None and trainer.state.last_good_step == 20
    assert metric_steps(tiny_workspace) == [10, 20]
    assert lock.holder(tiny_workspace.root) is None


def test_a_kill_between_log_line_and_checkpoint_loses_nothing_on_resume(tiny_workspace, monkeypatch):
    import minigpt.train.checkpoints as train_mod

    ws, real_save = tiny_workspace, train_mod.save_checkpoint

    def dies_at_30(path, payload):
        if payload["step"] == 30:
            raise SystemExit("killed")  # the process dies after logging step 30, before its checkpoint
        real_save(path, payload)

    monkeypatch.setattr(train_mod, "save_checkpoint", dies_at_30)
    with pytest.raises(SystemExit):
        Trainer(ws, debug_config(max_steps=40, eval_interval=10)).run()
    assert metric_steps(ws) == [10, 20, 30] and read_checkpoint(ws.latest_checkpoint)["step"] == 20
    monkeypatch.setattr(train_mod, "save_checkpoint", real_save)
    Trainer(ws, debug_config(max_steps=40, eval_interval=10), resume=True).run()
    assert metric_steps(ws) == [10, 20, 30, 40]
    assert read_checkpoint(ws.latest_checkpoint)["step"] == 40


def test_orphan_temp_files_of_a_killed_writer_are_removed_under_the_lock(trained_workspace):
    ws = trained_workspace
    orphans = [ws.checkpoints / ".mini_gpt_latest.pt.k3j2h1.tmp", ws.metrics.parent / ".metrics.jsonl.a1b2.tmp"]
    for path in orphans:
        path.write_bytes(b"half a checkpoint")
    notices = []
    trainer = Trainer(ws, debug_config(), resume=True, overrides={"max_steps": 125})
    trainer.register_callback("on_notice", notices.append)
    trainer.run()
    assert not any(p.exists() for p in orphans)
    assert sorted(n for n in notices if "interrupted save" in n) == sorted(
        f"removed {p}, left by an interrupted save" for p in orphans
    )


@pytest.mark.parametrize("flag", [["--grad-clip", "nan"], ["--lr", "inf"], ["--grad-clip", "-1"]])
def test_non_finite_or_negative_flags_exit_2(trained_workspace, capsys, flag):
    before = snapshot(trained_workspace)
    assert main(["train", "--workspace", str(trained_workspace.root), *flag, "--quiet"]) == 2
    assert "error:" in capsys.readouterr().err
    assert snapshot(trained_workspace) == before


def test_resume_past_max_steps_says_there_is_nothing_to_do(trained_workspace, capsys):
    before = snapshot(trained_workspace)
    assert main(["train", "--workspace", str(trained_workspace.root), "--resume", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "nothing to do" in err and "step 120" in err and "done:" not in err
    assert snapshot(trained_workspace) == before


def test_resume_banner_quotes_the_runs_step_count_not_the_presets(trained_workspace, capsys):
    assert main(["train", "--workspace", str(trained_workspace.root), "--resume", "--steps", "130", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "resuming at step 120 of 130" in err and "200" not in err.split("\n")[0]


def test_empty_val_split_is_refused_before_archiving(trained_workspace):
    atomic_torch_save(torch.zeros(0, dtype=torch.int64), trained_workspace.ids("val"))
    before = snapshot(trained_workspace)
    with pytest.raises(DataError, match="val_ids.pt"):
        Trainer(trained_workspace, debug_config(max_steps=5)).run()
    assert snapshot(trained_workspace) == before


def test_a_trainer_in_this_process_also_respects_the_lock(trained_workspace):
    # the UI runs Trainer in a worker thread: the same lock applies there
    before = snapshot(trained_workspace)
    with lock.acquire(trained_workspace.root, "prepare"):
        with pytest.raises(WorkspaceLockedError, match="minigpt prepare"):
            Trainer(trained_workspace, debug_config(max_steps=5)).run()
    assert snapshot(trained_workspace) == before


def test_an_os_error_mid_run_exits_2_naming_the_path(tiny_workspace, capsys):
    tiny_workspace.checkpoints.write_text("a file where the checkpoints folder should be")
    code = main(["train", "--workspace", str(tiny_workspace.root), "--steps", "5", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert str(tiny_workspace.checkpoints) in err and "last checkpoint: none" in err


@pytest.mark.slow
def test_after_a_sigkill_the_next_run_takes_the_stale_lock_over_and_resumes(tiny_workspace):
    ws = tiny_workspace
    killed = train_cli(ws, "--steps", "100000", "--eval-interval", "10")
    wait_for(lambda: ws.latest_checkpoint.exists())
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=60)
    saved = read_checkpoint(ws.latest_checkpoint)["step"]
    resumed = train_cli(ws, "--resume", "--steps", str(saved + 10))
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err
    assert f"took over a stale lock left by `minigpt train` (PID {killed.pid}" in err
    assert read_checkpoint(ws.latest_checkpoint)["step"] == saved + 10
    assert lock.holder(ws.root) is None
