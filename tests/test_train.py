"""Training: the loss goes down, checkpoints and metrics are written, resume is exact,
divergence stops before anything non-finite reaches disk, and the learning-rate schedule."""

from __future__ import annotations

import json
import math

import pytest
import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import ConfigError, TrainingDiverged
from minigpt.model.checkpoint import load_checkpoint, read_checkpoint
from minigpt.model.gpt import MiniGPT
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer

VOLATILE = {"time", "elapsed_s", "tokens_per_s"}  # wall-clock fields that differ between runs


def debug_config(**overrides) -> TrainConfig:
    return TrainConfig.from_preset("debug", **{"device": "cpu", "eval_batches": 5, **overrides})


def read_metrics(ws) -> list[dict]:
    return [json.loads(line) for line in ws.metrics.read_text(encoding="utf-8").splitlines()]


def test_short_run_lowers_the_loss_and_writes_checkpoints_and_metrics(tiny_workspace):
    ws = tiny_workspace
    vocab = CharTokenizer.from_file(ws.tokenizer).vocab_size
    evals = []
    trainer = Trainer(ws, debug_config(max_steps=60, eval_interval=20))
    trainer.register_callback("on_eval", evals.append)
    summary = trainer.run()

    assert [r["step"] for r in evals] == [20, 40, 60]
    first, last = evals[0]["val_loss"], evals[-1]["val_loss"]
    assert last < first - 0.2
    assert last < math.log(vocab) - 0.8
    assert summary["steps"] == 60 and not summary["stopped_early"]
    assert summary["best_val_loss"] == pytest.approx(min(r["val_loss"] for r in evals))

    assert ws.latest_checkpoint.is_file() and ws.best_checkpoint.is_file()
    latest = load_checkpoint(ws.latest_checkpoint, tokenizer=CharTokenizer.from_file(ws.tokenizer))
    assert latest.step == 60 and latest.fingerprint_mismatch is None
    assert {"optimizer_state_dict", "train_config", "rng_state"} <= set(latest.raw)

    lines = read_metrics(ws)
    assert [r["step"] for r in lines] == list(range(10, 61, 10))  # log_interval 10
    for record in lines:
        assert {"step", "train_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s", "time"} <= set(record)
        assert all(math.isfinite(record[k]) for k in ("train_loss", "lr", "grad_norm", "tokens_per_s"))
        assert ("val_loss" in record) == (record["step"] % 20 == 0)


@pytest.mark.slow
def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path, tiny_workspace):
    # GIVEN run A: 40 steps straight through, with dropout so the global RNG matters too
    import shutil

    from minigpt.io.workspace import Workspace

    ws_b = Workspace(tmp_path / "ws_b")
    shutil.copytree(tiny_workspace.root, ws_b.root)
    ws_a = tiny_workspace
    cfg = debug_config(max_steps=40, eval_interval=10, dropout=0.1)
    Trainer(ws_a, cfg).run()

    # WHEN run B is stopped after step 20 (same schedule), then resumed to step 40
    first = Trainer(ws_b, cfg)
    first.register_callback("on_step_end", lambda rec: rec["step"] == 20 and first.request_stop())
    summary = first.run()
    assert summary["steps"] == 20 and summary["stopped_early"]
    assert read_checkpoint(ws_b.latest_checkpoint)["step"] == 20
    Trainer(ws_b, cfg, resume=True).run()

    # THEN the weights and the logged numbers are exactly those of run A
    sd_a = read_checkpoint(ws_a.latest_checkpoint)["model_state_dict"]
    sd_b = read_checkpoint(ws_b.latest_checkpoint)["model_state_dict"]
    assert sd_a.keys() == sd_b.keys()
    for name in sd_a:
        assert torch.equal(sd_a[name], sd_b[name]), name
    strip = lambda rows: [{k: v for k, v in r.items() if k not in VOLATILE} for r in rows]  # noqa: E731
    metrics_a, metrics_b = strip(read_metrics(ws_a)), strip(read_metrics(ws_b))
    assert [r["step"] for r in metrics_b] == [10, 20, 30, 40]
    assert metrics_a == metrics_b


def test_resume_drops_metrics_logged_after_the_checkpoint(tiny_workspace):
    cfg = debug_config(max_steps=20, eval_interval=10)
    Trainer(tiny_workspace, cfg).run()
    with open(tiny_workspace.metrics, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 25, "train_loss": 1.0}) + "\n")  # logged, then the run crashed
    Trainer(tiny_workspace, debug_config(), resume=True, overrides={"max_steps": 30}).run()
    assert [r["step"] for r in read_metrics(tiny_workspace)] == [10, 20, 30]


def test_resume_refuses_a_checkpoint_from_another_tokenizer(tiny_workspace):
    Trainer(tiny_workspace, debug_config(max_steps=10, eval_interval=10)).run()
    tok = CharTokenizer.from_file(tiny_workspace.tokenizer)
    CharTokenizer(list(reversed(tok.chars))).save(tiny_workspace.tokenizer)
    with pytest.raises(ConfigError, match="cannot resume"):
        Trainer(tiny_workspace, debug_config(max_steps=20), resume=True).run()


def test_huge_learning_rate_raises_diverged_and_keeps_the_last_good_checkpoint(tiny_workspace):
    # GIVEN a learning rate that makes the gradient norm overflow within a few steps,
    # with a checkpoint every 2 steps so one is written before the blow-up
    ws = tiny_workspace
    cfg = debug_config(max_steps=100, eval_interval=2, eval_batches=1, learning_rate=1e3, grad_clip=0.0, warmup_steps=1)
    trainer = Trainer(ws, cfg)
    written = []

    def check_written(path):  # every checkpoint, as it lands on disk
        weights = read_checkpoint(path)["model_state_dict"]
        written.append(all(torch.isfinite(t).all() for t in weights.values()))

    trainer.register_callback("on_checkpoint", check_written)
    with pytest.raises(TrainingDiverged) as info:
        trainer.run()

    err = info.value
    assert f"step {err.step}" in str(err)
    assert 2 < err.step < 100
    assert written and all(written)
    assert err.last_good == str(ws.latest_checkpoint)
    good = load_checkpoint(ws.latest_checkpoint)
    assert good.step < err.step
    assert all(torch.isfinite(p).all() for p in good.model.parameters())
    last = read_metrics(ws)[-1]
    assert last["step"] == err.step and last["nonfinite"] is True


def test_divergence_before_any_checkpoint_says_none_was_written(tiny_workspace):
    cfg = debug_config(max_steps=100, eval_interval=50, learning_rate=1e6, grad_clip=0.0, warmup_steps=1)
    with pytest.raises(TrainingDiverged, match="no checkpoint was written yet") as info:
        Trainer(tiny_workspace, cfg).run()
    assert info.value.last_good is None
    assert not tiny_workspace.latest_checkpoint.exists()


def test_a_fresh_run_moves_the_previous_run_aside_instead_of_overwriting_it(tiny_workspace):
    from minigpt.train.config import TrainConfig
    from minigpt.train.trainer import Trainer

    cfg = TrainConfig.from_preset("debug", max_steps=10, eval_interval=5, device="cpu")
    Trainer(tiny_workspace, cfg).run()
    first = tiny_workspace.best_checkpoint.read_bytes()
    trainer = Trainer(
        tiny_workspace, TrainConfig.from_preset("debug", max_steps=10, eval_interval=5, device="cpu", seed=7)
    )
    trainer.run()
    assert trainer.archived is not None
    assert (trainer.archived / "checkpoints" / "mini_gpt_best.pt").read_bytes() == first
    assert (trainer.archived / "logs" / "metrics.jsonl").stat().st_size > 0
    assert tiny_workspace.best_checkpoint.read_bytes() != first


def test_resume_keeps_the_saved_schedule_unless_a_flag_overrides_it(tiny_workspace):
    from minigpt.train.config import TrainConfig
    from minigpt.train.trainer import Trainer

    first = Trainer(
        tiny_workspace,
        TrainConfig.from_preset("debug", max_steps=30, eval_interval=10, learning_rate=3e-3, device="cpu"),
    )
    first.register_callback("on_step_end", lambda rec: rec["step"] == 10 and first.request_stop())
    first.run()
    resumed = Trainer(tiny_workspace, TrainConfig.from_preset("debug", device="cpu"), resume=True)
    summary = resumed.run()
    assert resumed.cfg.learning_rate == 3e-3 and summary["steps"] == 30
    extended = Trainer(
        tiny_workspace, TrainConfig.from_preset("debug", device="cpu"), resume=True, overrides={"max_steps": 40}
    )
    assert extended.run()["steps"] == 40


def test_resume_from_a_foreign_checkpoint_is_a_typed_error(tiny_workspace):
    import pytest
    import torch

    from minigpt.errors import CheckpointError
    from minigpt.io.atomic import atomic_torch_save
    from minigpt.train.config import TrainConfig
    from minigpt.train.trainer import Trainer

    Trainer(tiny_workspace, TrainConfig.from_preset("debug", max_steps=10, eval_interval=10, device="cpu")).run()
    payload = torch.load(tiny_workspace.latest_checkpoint, weights_only=True)
    del payload["rng_state"]
    atomic_torch_save(payload, tiny_workspace.latest_checkpoint)
    with pytest.raises(CheckpointError, match="rng_state"):
        Trainer(tiny_workspace, TrainConfig.from_preset("debug", device="cpu"), resume=True).run()


def test_gradient_log_rows_are_the_norms_before_the_clip_and_add_up_to_the_global_norm(tiny_workspace):
    # GIVEN a clip so tight that every step is clipped
    Trainer(tiny_workspace, debug_config(max_steps=20, eval_interval=10, grad_clip=0.05)).run()
    lines = [json.loads(line) for line in tiny_workspace.grads.read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in lines] == [10, 20]
    model = MiniGPT(
        TrainConfig.from_preset("debug").model_config(CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size)
    )
    for record in lines:
        assert record["global_norm"] > record["clip"]  # clipped
        assert [r["name"] for r in record["rows"]] == [n for n, _ in model.named_parameters()]
        total = math.sqrt(sum(r["grad_norm"] ** 2 for r in record["rows"]))
        assert total == pytest.approx(record["global_norm"], rel=1e-4)
        assert all(r["flags"] == [] and r["weight_norm"] > 0 for r in record["rows"])


def test_gradient_log_rows_of_a_layer_frozen_at_start_have_no_norm_and_the_others_keep_theirs(tiny_workspace):
    # GIVEN a callback that freezes one LayerNorm once the model exists: it gets no gradient
    trainer = Trainer(tiny_workspace, debug_config(max_steps=10, eval_interval=10))
    frozen = "blocks.0.ln1.weight"
    trainer.register_callback(
        "on_start",
        lambda _: trainer.state.model.get_parameter(frozen).requires_grad_(False),  # type: ignore[union-attr]
    )
    trainer.run()
    (record,) = [json.loads(line) for line in tiny_workspace.grads.read_text(encoding="utf-8").splitlines()]
    rows = {r["name"]: r for r in record["rows"]}
    assert rows[frozen]["grad_norm"] is None and rows[frozen]["flags"] == ["frozen"]
    others = [r for name, r in rows.items() if name != frozen]
    assert all(r["flags"] == [] and r["grad_norm"] > 0 for r in others)
    total = math.sqrt(sum(r["grad_norm"] ** 2 for r in others))
    assert total == pytest.approx(record["global_norm"], rel=1e-4)


def test_evaluation_is_the_mean_loss_over_fixed_windows(tiny_workspace):
    from minigpt.data.batches import get_batch, load_ids

    cfg = debug_config(eval_batches=3)
    trainer = Trainer(tiny_workspace, cfg)
    torch.manual_seed(0)
    model = MiniGPT(cfg.model_config(CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size))
    data = load_ids(tiny_workspace.ids("val"))
    got = trainer.evaluate(model, {"val": data})["val"]
    assert trainer.evaluate(model, {"val": data})["val"] == got  # the same windows every time
    x, y = get_batch(data, cfg.batch_size * 3, cfg.block_size, "cpu", torch.Generator().manual_seed(cfg.seed + 1))
    with torch.no_grad():
        per_window = [model(x[i : i + 1], y[i : i + 1])[1].item() for i in range(len(x))]
    assert got == pytest.approx(sum(per_window) / len(per_window), rel=1e-5)
    assert model.training  # put back in training mode
