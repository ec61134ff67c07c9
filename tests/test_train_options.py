"""GPU-box options of `minigpt train`: --dtype (autocast, float16 loss scaling), --compile, TF32 on CUDA.
Each runs here where it can (bfloat16 and float16 autocast on CPU, compile when a C++ compiler is
present) and is skipped with a reason where CUDA is missing."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch

from minigpt.cli import main
from minigpt.errors import ConfigError
from minigpt.model.checkpoint import read_checkpoint
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available on this machine")


def debug_config(**overrides) -> TrainConfig:
    return TrainConfig.from_preset("debug", **{"device": "cpu", "eval_batches": 5, **overrides})


def read_metrics(ws) -> list[dict]:
    return [json.loads(line) for line in ws.metrics.read_text(encoding="utf-8").splitlines()]


def record_linear_dtypes(trainer: Trainer) -> list[torch.dtype]:
    """The output dtype of the first attention projection at every training forward pass."""
    seen: list[torch.dtype] = []

    def hook(module, inputs, out) -> None:  # returns None: the output is left alone
        if module.training:
            seen.append(out.dtype)

    def on_start(_info):
        trainer.state.model.blocks[0].attn.qkv.register_forward_hook(hook)  # type: ignore[union-attr]

    trainer.register_callback("on_start", on_start)
    return seen


def test_bfloat16_autocast_runs_the_steps_in_bfloat16_and_keeps_float32_weights(tiny_workspace):
    trainer = Trainer(tiny_workspace, debug_config(max_steps=30, eval_interval=30, dtype="bfloat16"))
    seen = record_linear_dtypes(trainer)
    summary = trainer.run()
    assert set(seen) == {torch.bfloat16}
    raw = read_checkpoint(tiny_workspace.latest_checkpoint)
    assert {t.dtype for t in raw["model_state_dict"].values()} == {torch.float32}
    assert raw["train_config"]["dtype"] == "bfloat16" and "scaler_state_dict" not in raw
    assert summary["best_val_loss"] < 4.0  # it learns (uniform is log(vocab) ~ 4.5)


def test_float32_is_the_default_and_runs_without_autocast(tiny_workspace):
    trainer = Trainer(tiny_workspace, debug_config(max_steps=3, eval_interval=3))
    seen = record_linear_dtypes(trainer)
    trainer.run()
    assert set(seen) == {torch.float32}


def test_bfloat16_follows_the_float32_loss(tmp_path, tiny_workspace):
    shutil.copytree(tiny_workspace.root, tmp_path / "ws32")
    from minigpt.io.workspace import Workspace

    ws32 = Workspace(tmp_path / "ws32")
    Trainer(ws32, debug_config(max_steps=40, eval_interval=20)).run()
    Trainer(tiny_workspace, debug_config(max_steps=40, eval_interval=20, dtype="bfloat16")).run()
    for a, b in zip(read_metrics(ws32), read_metrics(tiny_workspace), strict=True):
        assert abs(a["train_loss"] - b["train_loss"]) < 0.05, (a, b)


@pytest.mark.slow
def test_float16_scales_the_loss_and_saves_the_scaler_for_resume(tiny_workspace):
    Trainer(tiny_workspace, debug_config(max_steps=20, eval_interval=10, dtype="float16")).run()
    raw = read_checkpoint(tiny_workspace.latest_checkpoint)
    assert raw["scaler_state_dict"]["scale"] > 1
    assert all(math.isfinite(r["train_loss"]) for r in read_metrics(tiny_workspace))
    trainer = Trainer(tiny_workspace, debug_config(), resume=True, overrides={"max_steps": 30})
    trainer.run()
    assert trainer.cfg.dtype == "float16"  # the saved run's dtype, as with every other setting
    assert trainer.state.scaler is not None  # type: ignore[union-attr]


def test_a_float16_overflow_skips_the_update_instead_of_stopping_as_diverged(tiny_workspace, monkeypatch):
    # GIVEN a loss scale so large that the float16 gradients overflow for the first steps
    def huge_scaler(cfg, device, saved=None):
        return torch.amp.GradScaler(device.type, init_scale=2.0**40)

    monkeypatch.setattr("minigpt.train.run_state.make_scaler", huge_scaler)
    before = {}
    trainer = Trainer(tiny_workspace, debug_config(max_steps=10, eval_interval=10, dtype="float16"))
    trainer.register_callback("on_start", lambda _: before.update(trainer.state.model.state_dict()))  # type: ignore[union-attr]
    records: list[dict] = []
    trainer.register_callback("on_step_end", records.append)
    summary = trainer.run()
    # THEN the steps are marked skipped, the weights stand still, and the scaler backs off
    assert summary["steps"] == 10
    assert records[0].get("skipped") is True and not math.isfinite(records[0]["grad_norm"])
    first_line = json.loads(tiny_workspace.metrics.read_text().splitlines()[0])
    assert first_line.get("skipped") is True and first_line["grad_norm"] in ("inf", "nan")  # JSON has no NaN
    assert all(math.isfinite(r["train_loss"]) for r in records)
    assert read_checkpoint(tiny_workspace.latest_checkpoint)["scaler_state_dict"]["scale"] < 2.0**40


def test_a_float32_non_finite_gradient_still_stops_as_diverged(tiny_workspace):
    from minigpt.errors import TrainingDiverged

    with pytest.raises(TrainingDiverged):
        Trainer(tiny_workspace, debug_config(max_steps=30, learning_rate=1e6, grad_clip=0.0, warmup_steps=0)).run()


@pytest.mark.parametrize("bad", [{"dtype": "float64"}, {"dtype": "half"}, {"compile": "yes"}])
def test_bad_dtype_or_compile_values_are_config_errors(bad):
    with pytest.raises(ConfigError):
        debug_config(**bad)


def test_cli_passes_dtype_and_compile_and_rejects_unknown_dtypes(tiny_workspace, capsys, monkeypatch):
    seen = {}

    def fake_run(self):
        seen.update(dtype=self.cfg.dtype, compile=self.cfg.compile)
        return {"steps": 1, "best_val_loss": 1.0, "val_loss": 1.0, "stopped_early": False, "seconds": 0.0}

    monkeypatch.setattr(Trainer, "run", fake_run)
    assert main(["train", "--workspace", str(tiny_workspace.root), "--dtype", "bfloat16", "--compile", "--quiet"]) == 0
    assert seen == {"dtype": "bfloat16", "compile": True}
    with pytest.raises(SystemExit) as exc:
        main(["train", "--workspace", str(tiny_workspace.root), "--dtype", "float64"])
    assert exc.value.code == 2


@pytest.mark.slow
@pytest.mark.skipif(
    not (shutil.which("c++") or shutil.which("g++")), reason="torch.compile on CPU needs a C++ compiler"
)
def test_compile_trains_and_no_orig_mod_prefix_reaches_the_checkpoint(tiny_workspace):
    # about a minute on 2 CPU cores, nearly all of it compiling
    trainer = Trainer(tiny_workspace, debug_config(max_steps=4, eval_interval=4, compile=True))
    trainer.run()
    # the compiled module's own keys carry the prefix: the checkpoint must not
    assert all(k.startswith("_orig_mod.") for k in trainer.state.step_model.state_dict())  # type: ignore[union-attr]
    keys = read_checkpoint(tiny_workspace.latest_checkpoint)["model_state_dict"]
    assert keys and not any("_orig_mod." in k for k in keys)


@needs_cuda
def test_cuda_bfloat16_with_tf32_trains_and_restores_the_matmul_precision(tiny_workspace):
    before = torch.get_float32_matmul_precision()
    seen = []
    trainer = Trainer(tiny_workspace, debug_config(device="cuda", max_steps=10, eval_interval=10, dtype="bfloat16"))
    trainer.register_callback("on_step_end", lambda _: seen.append(torch.get_float32_matmul_precision()))
    trainer.run()
    assert set(seen) == {"high"} and torch.get_float32_matmul_precision() == before


@needs_cuda
def test_cuda_float16_trains(tiny_workspace):
    summary = Trainer(
        tiny_workspace, debug_config(device="cuda", max_steps=20, eval_interval=20, dtype="float16")
    ).run()
    assert summary["best_val_loss"] < 4.0
