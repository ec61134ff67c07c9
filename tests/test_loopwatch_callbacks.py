"""The watch inside a Hugging Face `Trainer` and a Lightning `Trainer`: real tiny runs of each, the
loop checks clean on them. Skipped where the extra does not install."""

from __future__ import annotations

import json

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, run_checks
from minigpt.checks.registry import catalog
from minigpt.io.workspace import Workspace
from minigpt.loopwatch import callbacks
from minigpt.loopwatch.loop_log import read_loop_log
from tests.fixtures import loops

LOOP_IDS = [cid for cid, info in catalog().items() if info.stage == "loop"]


def loop_verdicts(run_dir) -> dict[str, tuple[str, str]]:
    report = run_checks(CheckContext(CheckOptions(workspace=run_dir, device="cpu")), only=LOOP_IDS + ["training_curve"])
    return {r.id: (r.status.value, r.summary) for r in report.results}


def _windows(ids: torch.Tensor, n: int, T: int = 32) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    starts = torch.randint(0, len(ids) - T, (n,), generator=gen)
    return [ids[s : s + T] for s in starts]


@pytest.mark.slow
def test_hf_trainer_run_is_watched_and_clean(tmp_path):
    transformers = pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate")
    ids, vocab = loops.demo_ids()
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    train = [{"input_ids": w, "labels": w} for w in _windows(ids, 256)]
    val = [{"input_ids": w, "labels": w} for w in _windows(ids[-20000:], 16)]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        max_steps=16,
        learning_rate=1e-3,
        warmup_steps=4,
        logging_steps=4,
        eval_strategy="steps",
        eval_steps=8,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    run = tmp_path / "run"
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=train, eval_dataset=val, callbacks=[callbacks.hf_callback(run)]
    )
    trainer.train()
    log = read_loop_log(Workspace(run))
    assert log is not None and log.closed is not None and len(log.steps) == 16
    verdicts = loop_verdicts(run)
    bad = {k: v for k, v in verdicts.items() if k.startswith("loop_") and v[0] in ("fail", "error", "warn")}
    assert not bad, bad
    assert verdicts["loop_accumulation"][0] == "pass"  # the Trainer divides the loss over its 2 micro-batches
    assert verdicts["loop_targets_shifted"][0] == "pass"  # labels = input_ids, shifted inside GPT-2
    assert verdicts["loop_scheduler"][0] == "pass"  # its linear schedule is stepped
    # GPT-2 given `num_items_in_batch` returns its loss pre-divided over the 2 micro-batches: the
    # metrics give the mean cross-entropy, scaled back by exactly 2 (the backward's weight says so)
    lines = [json.loads(line) for line in Workspace(run).metrics.read_text().splitlines()]
    sources = {line["loss_source"] for line in lines if "loss_source" in line}
    assert sources == {"model x 2 (its loss came pre-divided; the factor is read at the logits)"}


def test_lightning_fit_is_watched_and_clean(tmp_path):
    pl = pytest.importorskip("lightning.pytorch", reason="the [lightning] extra is not installed")
    ids, vocab = loops.demo_ids()

    class LitGPT(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = loops.small_model(vocab)

        def forward(self, x, y):
            return self.model(x, y)

        def training_step(self, batch, batch_idx):
            _, loss = self(*batch)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            _, loss = self(*batch)
            self.log("val_loss", loss)

        def configure_optimizers(self):
            decay = [p for p in self.parameters() if p.dim() >= 2]
            rest = [p for p in self.parameters() if p.dim() < 2]
            return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}])

    def pairs(n, source):
        return [(w[:-1], w[1:]) for w in _windows(source, n, 33)]

    torch.manual_seed(0)
    train = torch.utils.data.DataLoader(pairs(256, ids), batch_size=8, shuffle=True)
    val = torch.utils.data.DataLoader(pairs(16, ids[-20000:]), batch_size=8)
    run = tmp_path / "run"
    trainer = pl.Trainer(
        max_steps=20,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        val_check_interval=10,
        gradient_clip_val=1.0,
        callbacks=[callbacks.lightning_callback(run)],
    )
    trainer.fit(LitGPT(), train, val)
    log = read_loop_log(Workspace(run))
    assert log is not None and log.closed is not None and len(log.steps) == 20
    assert all(s["closure"] for s in log.steps)  # Lightning runs forward and backward inside step(closure)
    verdicts = loop_verdicts(run)
    bad = {k: v for k, v in verdicts.items() if k.startswith("loop_") and v[0] in ("fail", "error", "warn")}
    assert not bad, bad
    assert verdicts["loop_eval_mode"][0] == "pass"
    assert verdicts["loop_train_mode"][0] == "pass"


def test_scalars_from_library_logs_use_our_names():
    assert callbacks._scalars({"eval_loss": 2.0, "learning_rate": 1e-3, "epoch": 1.0, "loss": 3.0, "x/y": 1}) == {
        "val_loss": 2.0,
        "loss": 3.0,
        "x_y": 1.0,
    }


def test_hf_end_of_training_summary_is_no_train_loss_record(tmp_path):
    # GIVEN the Trainer's callback on a model that returns logits only (its loss is the loop's)
    pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")
    from types import SimpleNamespace

    model = torch.nn.Linear(4, 4)
    cb = callbacks.hf_callback(tmp_path / "run")
    cb.on_train_begin(None, None, None, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    state = SimpleNamespace(global_step=100)
    # WHEN it forwards step 100's loss, the final evaluation, then train()'s summary (the run's mean loss)
    cb.on_log(None, state, None, logs={"loss": 1.9, "learning_rate": 5e-4})
    cb.on_log(None, state, None, logs={"eval_loss": 2.9, "eval_runtime": 0.4})
    summary = {"train_runtime": 31.2, "train_samples_per_second": 51.3, "total_flos": 1.2e12, "train_loss": 2.61}
    cb.on_log(None, state, None, logs=summary)
    cb.on_train_end(None, state, None)
    lines = [json.loads(line) for line in Workspace(tmp_path / "run").metrics.read_text().splitlines()]
    # THEN the summary's mean loss is kept under its own name, and step 100 keeps its losses
    assert [line.get("train_loss") for line in lines] == [1.9, None, None]
    assert lines[-1]["mean_train_loss"] == 2.61
    from minigpt.logs.metrics import merge_steps, read_metrics

    (last,) = merge_steps(read_metrics(Workspace(tmp_path / "run").metrics).points)[-1:]
    assert (last.train_loss, last.val_loss) == (1.9, 2.9)


@pytest.mark.slow
@pytest.mark.parametrize("module", [None, "model"])
def test_lightning_callback_warns_when_training_step_calls_a_submodule(tmp_path, capsys, module):
    # GIVEN a LightningModule whose training_step calls its child (`self.model(x)`, not `self(x)`)
    pl = pytest.importorskip("lightning.pytorch", reason="the [lightning] extra is not installed")
    ids, vocab = loops.demo_ids()

    class LitGPT(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = loops.small_model(vocab)

        def training_step(self, batch, batch_idx):
            return self.model(*batch)[1]

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    pairs = [(w[:-1], w[1:]) for w in _windows(ids, 64, 33)]
    train = torch.utils.data.DataLoader(pairs, batch_size=8, shuffle=True)
    run = tmp_path / "run"
    trainer = pl.Trainer(
        max_steps=5,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[callbacks.lightning_callback(run, module=module)],
    )
    trainer.fit(LitGPT(), train)
    err = capsys.readouterr().err
    train_mode = loop_verdicts(run)["loop_train_mode"]
    if module is None:
        # THEN the callback says at the first step that it sees no forward, and names the option
        assert "never ran forward in the first training step" in err and "module='model'" in err
        # AND the mode check skips saying why, instead of passing on zero forwards
        assert train_mode[0] == "skip" and "never ran forward" in train_mode[1]
    else:
        assert "never ran forward" not in err
        assert train_mode == ("pass", "all 5 training forwards ran in train mode")
