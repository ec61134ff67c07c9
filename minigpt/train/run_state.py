"""What a run carries from step to step (`RunState`), and the two ways a run gets one: built fresh
from the seed, or restored from `latest` for `--resume`.

Both read and check every input first (the token IDs against the vocabulary, the memory estimate,
the checkpoint's resume fields) and write nothing: a fresh run moves the previous one aside only
once its state is built (`Trainer._start_fresh`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minigpt.data.batches import load_split
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import CheckpointError, ConfigError
from minigpt.io.workspace import Workspace
from minigpt.model.checkpoint import load_checkpoint, read_checkpoint
from minigpt.model.gpt import MiniGPT
from minigpt.model.gradstats import RowParam
from minigpt.model.memory import require_fits
from minigpt.train.config import TrainConfig, make_optimizer
from minigpt.train.distributed import World
from minigpt.train.resume import load_optimizer_state, require_resumable, restore_rng_state


@dataclass
class RunState:
    """Everything a run carries from step to step (and what `--resume` restores)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batch_gen: torch.Generator
    tokenizer: CharTokenizer
    train_data: torch.Tensor
    val_data: torch.Tensor
    step: int = 0
    best_val: float = float("inf")
    last_good: str | None = None  # a checkpoint with finite weights, if one was written or resumed from
    last_good_step: int | None = None
    val_loss: float | None = None
    run_start: float = 0.0
    step_model: torch.nn.Module | None = None  # what the steps call: `model`, compiled and/or wrapped in DDP
    scaler: torch.amp.GradScaler | None = None  # float16 only: loss scaling against gradient underflow
    named_params: list[tuple[str, torch.nn.Parameter]] = field(default_factory=list)  # once, not per step
    row_params: list[RowParam] = field(default_factory=list)  # the same, with what grads.jsonl rows say of each


def fresh_state(
    ws: Workspace, cfg: TrainConfig, tokenizer: CharTokenizer, world: World, device: torch.device, *, allow_large: bool
) -> RunState:
    """A new model and optimizer from `cfg.seed`, once the data and the memory estimate are checked."""
    train_data, val_data = _load_data(ws, cfg, tokenizer.vocab_size)
    _require_fits(cfg, device, tokenizer.vocab_size, "this training config", allow_large)
    batch_gen = torch.Generator().manual_seed(cfg.seed + world.rank)  # each rank draws its own batches
    torch.manual_seed(cfg.seed)
    model = MiniGPT(cfg.model_config(tokenizer.vocab_size)).to(device)
    optimizer = make_optimizer(model, cfg)
    if world.rank:  # same initial weights (DDP broadcasts rank 0's anyway), other dropout masks
        torch.manual_seed(cfg.seed + world.rank)
    model.train()
    return RunState(model, optimizer, batch_gen, tokenizer, train_data, val_data, scaler=make_scaler(cfg, device))


def read_latest(ws: Workspace) -> dict:
    """The `latest` checkpoint as saved, checked to hold everything `--resume` restores."""
    path = ws.latest_checkpoint
    if not os.path.lexists(path) and ws.best_checkpoint.is_file():
        raise CheckpointError(
            f"cannot resume: {path} is missing but {ws.best_checkpoint} is there: the run stopped "
            "between its first two saves (best is written before latest), before any state to resume from",
            path=path,
            causes=["start a fresh run (`minigpt train` without --resume): it moves best to previous/ first"],
        )
    raw = read_checkpoint(path)
    require_resumable(raw, path)
    return raw


def resumed_state(
    raw: dict,
    path: Path,
    ws: Workspace,
    cfg: TrainConfig,
    tokenizer: CharTokenizer,
    world: World,
    device: torch.device,
    *,
    allow_large: bool,
    notify: Callable[[str], None],
) -> RunState:
    """The run saved in `raw` (read from `path` by `read_latest`) under `cfg`, the settings it resumes
    with (`resumed_config`): weights, optimizer, generator and scaler states, step and best loss."""
    train_data, val_data = _load_data(ws, cfg, tokenizer.vocab_size)
    _require_fits(cfg, device, tokenizer.vocab_size, path, allow_large)
    batch_gen = torch.Generator().manual_seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    ckpt = load_checkpoint(path, device, tokenizer=tokenizer, data=raw)
    if ckpt.fingerprint_mismatch:
        raise ConfigError(f"cannot resume: {ckpt.fingerprint_mismatch}")
    model = ckpt.model
    model.train()
    optimizer = make_optimizer(model, cfg)
    load_optimizer_state(optimizer, raw, path)
    notice = restore_rng_state(raw, world, cfg.seed, batch_gen, path)
    if notice:
        notify(notice)
    try:
        scaler = make_scaler(cfg, device, raw.get("scaler_state_dict"))
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(
            f"cannot resume from {path}: scaler_state_dict is not a saved GradScaler state: {str(exc)[:200]}",
            path=path,
        ) from None
    best = raw.get("best_val_loss")
    best_val = float("inf") if best is None else float(best)
    return RunState(
        model,
        optimizer,
        batch_gen,
        tokenizer,
        train_data,
        val_data,
        step=raw["step"],
        best_val=best_val,
        last_good=str(path),
        last_good_step=raw["step"],
        scaler=scaler,
    )


def make_scaler(cfg: TrainConfig, device: torch.device, saved: dict | None = None) -> torch.amp.GradScaler | None:
    if cfg.dtype != "float16":
        return None
    scaler = torch.amp.GradScaler(device.type)
    if saved:
        scaler.load_state_dict(saved)
    return scaler


def _load_data(ws: Workspace, cfg: TrainConfig, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    train, val = (load_split(ws.ids(s), vocab_size, cfg.block_size) for s in ("train", "val"))
    return train, val


def _require_fits(cfg: TrainConfig, device: torch.device, vocab_size: int, what: object, allow_large: bool) -> None:
    if not allow_large:
        require_fits(cfg.model_config(vocab_size), device, batch_size=cfg.batch_size, training=True, what=what)
