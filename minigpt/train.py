"""Training loop: AdamW, warmup + cosine decay, clipping, eval, checkpoints, exact resume.

The library never knows a UI exists: progress goes out through callbacks
(`trainer.register_callback("on_step_end", fn)`, minGPT style).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from .checkpoint import load_checkpoint, save_checkpoint
from .data import get_batch, load_ids
from .device import resolve_device
from .errors import CheckpointError, ConfigError, TrainingDiverged
from .fileio import atomic_write_text
from .gradstats import grad_table
from .model import MiniGPT, MiniGPTConfig
from .tokenizer import CharTokenizer
from .workspace import Workspace

PRESETS = {
    # model shape + batch size; the rest of TrainConfig keeps its defaults
    "debug": dict(
        block_size=32,
        embedding_dim=64,
        num_heads=4,
        num_layers=2,
        expansion_factor=4,
        dropout=0.0,
        batch_size=8,
        max_steps=200,
        eval_interval=50,
        warmup_steps=20,
    ),
    "small": dict(
        block_size=64,
        embedding_dim=128,
        num_heads=4,
        num_layers=4,
        expansion_factor=4,
        dropout=0.0,
        batch_size=32,
        max_steps=2500,
        eval_interval=250,
        warmup_steps=100,
        learning_rate=2e-3,
    ),
}
MODEL_FIELDS = {f.name for f in fields(MiniGPTConfig)} - {"vocab_size"}


@dataclass
class TrainConfig:
    block_size: int = 32  # model shape (vocab_size comes from the tokenizer)
    embedding_dim: int = 64
    num_heads: int = 4
    num_layers: int = 2
    expansion_factor: int = 4
    dropout: float = 0.0
    batch_size: int = 8  # sequences per micro-batch
    grad_accum: int = 1  # micro-batches per optimizer step
    max_steps: int = 200  # optimizer steps
    learning_rate: float = 1e-3  # peak, after warmup
    min_lr_ratio: float = 0.1  # cosine decays to learning_rate * min_lr_ratio
    warmup_steps: int = 20
    weight_decay: float = 0.1
    beta2: float = 0.99
    grad_clip: float = 1.0  # max global gradient norm (0 = off)
    eval_interval: int = 50  # evaluate and save `latest` every N steps (and at the end)
    eval_batches: int = 20  # batches per split at each evaluation
    log_interval: int = 10  # metrics.jsonl line every N steps (eval steps always logged)
    seed: int = 1337
    device: str = "auto"

    def __post_init__(self) -> None:
        positive = ("batch_size", "grad_accum", "max_steps", "eval_interval", "eval_batches", "log_interval")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive integer; found {value!r}")
        if not self.learning_rate > 0 or not math.isfinite(self.learning_rate):
            raise ConfigError(f"learning rate must be a positive number; found {self.learning_rate!r}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("warmup-steps and grad-clip must be >= 0, min_lr_ratio in [0, 1]")
        self.model_config(vocab_size=1)  # shape errors (heads not dividing the width, ...) now

    @classmethod
    def from_preset(cls, name: str, **overrides) -> TrainConfig:
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        cfg = replace(cls(), **PRESETS[name])
        return replace(cfg, **{k: v for k, v in overrides.items() if v is not None})

    def model_config(self, vocab_size: int) -> MiniGPTConfig:
        return MiniGPTConfig(vocab_size=vocab_size, **{k: getattr(self, k) for k in sorted(MODEL_FIELDS)})


TRAIN_FIELDS = {f.name for f in fields(TrainConfig)}


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warmup to the peak, then cosine decay to `min_lr_ratio * peak` at `max_steps`."""
    peak, floor = cfg.learning_rate, cfg.learning_rate * cfg.min_lr_ratio
    if step < cfg.warmup_steps:
        return peak * (step + 1) / cfg.warmup_steps
    progress = min(1.0, (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps))
    return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (peak - floor)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # no weight decay on biases, LayerNorm weights and other 1-D parameters (nanoGPT)
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    # the fused kernel updates all parameters in one op: ~20% faster steps on the debug shape (CPU)
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(0.9, cfg.beta2), fused=fused or None)


def _rng_state(batch_gen: torch.Generator) -> dict:
    state = {"batch": batch_gen.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict, batch_gen: torch.Generator) -> None:
    batch_gen.set_state(state["batch"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Trainer:
    EVENTS = ("on_step_end", "on_eval", "on_checkpoint", "on_log", "on_archive")

    def __init__(
        self, workspace: Workspace | str, cfg: TrainConfig, *, resume: bool = False, overrides: dict | None = None
    ):
        self.ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self.cfg = cfg
        # flags the user gave explicitly: on --resume they override the saved run's settings
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.resume = resume
        self.callbacks: dict[str, list[Callable]] = defaultdict(list)
        self.stop_requested = False
        self.archived: Path | None = None  # where a fresh run moved the previous run's files
        self.device = resolve_device(cfg.device)

    def register_callback(self, event: str, fn: Callable) -> None:
        if event not in self.EVENTS:
            raise ValueError(f"unknown event {event!r}; expected one of {self.EVENTS}")
        self.callbacks[event].append(fn)

    def _fire(self, event: str, *args) -> None:
        for fn in self.callbacks[event]:
            fn(*args)

    def request_stop(self) -> None:
        """Stop after the current step (saving `latest`); safe to call from another thread."""
        self.stop_requested = True

    @torch.no_grad()
    def evaluate(self, model, splits: dict[str, torch.Tensor]) -> dict[str, float]:
        model.eval()
        out = {}
        for name, data in splits.items():
            # a fixed generator: every evaluation sees the same batches, and the training RNG is untouched
            gen = torch.Generator().manual_seed(self.cfg.seed + 1)
            losses = torch.zeros(self.cfg.eval_batches)
            for i in range(self.cfg.eval_batches):
                x, y = get_batch(data, self.cfg.batch_size, self.cfg.block_size, self.device, gen)
                losses[i] = model(x, y)[1].item()
            out[name] = losses.mean().item()
        model.train()
        return out

    def run(self) -> dict:
        cfg, ws = self.cfg, self.ws
        tokenizer = CharTokenizer.from_file(ws.tokenizer)
        train_data, val_data = load_ids(ws.ids("train")), load_ids(ws.ids("val"))
        batch_gen = torch.Generator().manual_seed(cfg.seed)
        torch.manual_seed(cfg.seed)
        start_step, best_val = 0, float("inf")
        if self.resume:
            ckpt = load_checkpoint(ws.latest_checkpoint, self.device, tokenizer=tokenizer)
            if ckpt.fingerprint_mismatch:
                raise ConfigError(f"cannot resume: {ckpt.fingerprint_mismatch}")
            missing = [k for k in ("optimizer_state_dict", "rng_state", "step") if ckpt.raw.get(k) is None]
            if missing:
                raise CheckpointError(
                    f"cannot resume from {ws.latest_checkpoint}: it has no {', '.join(missing)} "
                    "(not written by `minigpt train`)",
                    path=ws.latest_checkpoint,
                    causes=["the checkpoint comes from another training script"],
                )
            # the saved run's settings, then the flags given now; the model shape is the checkpoint's
            saved = {k: v for k, v in (ckpt.raw.get("train_config") or {}).items() if k in TRAIN_FIELDS}
            shape = {k: v for k, v in ckpt.config.items() if k in MODEL_FIELDS}
            ignored = sorted(k for k in self.overrides if k in MODEL_FIELDS)
            if ignored:
                raise ConfigError(f"--resume keeps the checkpoint's model shape; drop {', '.join(ignored)}")
            self.cfg = cfg = replace(cfg, **{**saved, **shape, **self.overrides, "device": cfg.device})
            model = ckpt.model
            model.train()
            optimizer = make_optimizer(model, cfg)
            optimizer.load_state_dict(ckpt.raw["optimizer_state_dict"])
            _set_rng_state(ckpt.raw["rng_state"], batch_gen)
            start_step, best_val = int(ckpt.step), float(ckpt.raw.get("best_val_loss", float("inf")))
            self._truncate_metrics(start_step)
        else:
            model = MiniGPT(cfg.model_config(tokenizer.vocab_size)).to(self.device)
            optimizer = make_optimizer(model, cfg)
            self.archived = self._archive_previous_run()
            ws.metrics.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text("", ws.metrics)
            atomic_write_text("", ws.grads)
        model.train()
        last_good = str(ws.latest_checkpoint) if ws.latest_checkpoint.exists() and self.resume else None
        tokens_per_step = cfg.batch_size * cfg.block_size * cfg.grad_accum
        run_start = time.perf_counter()
        summary = {"steps": start_step, "best_val_loss": best_val, "val_loss": None, "stopped_early": False}
        step = start_step
        with open(ws.metrics, "a", encoding="utf-8") as log:
            while step < cfg.max_steps and not self.stop_requested:
                t0 = time.perf_counter()
                lr = lr_at(step, cfg)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                loss_sum = torch.zeros((), device=self.device)
                for _ in range(cfg.grad_accum):
                    x, y = get_batch(train_data, cfg.batch_size, cfg.block_size, self.device, batch_gen)
                    _, loss = model(x, y)
                    (loss / cfg.grad_accum).backward()
                    loss_sum += loss.detach()
                params = [p for p in model.parameters() if p.grad is not None]
                if cfg.grad_clip > 0:
                    grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                else:
                    grad_norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm([p.grad for p in params])))
                # one host sync per step for both numbers (a CPU-GPU sync point)
                train_loss, norm = torch.stack([loss_sum / cfg.grad_accum, grad_norm.float()]).tolist()
                step += 1
                if not (math.isfinite(train_loss) and math.isfinite(norm)):
                    record = {
                        "step": step,
                        "train_loss": _json_float(train_loss),
                        "lr": lr,
                        "grad_norm": _json_float(norm),
                        "nonfinite": True,
                        "time": time.time(),
                    }
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    where = f"last good checkpoint: {last_good}" if last_good else "no checkpoint was written yet"
                    raise TrainingDiverged(
                        f"training diverged at step {step}: loss={train_loss}, gradient norm={norm} "
                        f"(learning rate {lr:.3g}); nothing was saved from this step; {where}",
                        step=step,
                        last_good=last_good,
                    )
                if (step % cfg.eval_interval == 0 or step == cfg.max_steps) and self.ws.metrics.parent.is_dir():
                    self._log_grads(model, step, norm)  # the gradients pane follows this file
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                dt = time.perf_counter() - t0
                record = {
                    "step": step,
                    "train_loss": train_loss,
                    "lr": lr,
                    "grad_norm": norm,
                    "tokens_per_s": tokens_per_step / dt,
                    "elapsed_s": time.perf_counter() - run_start,
                    "time": time.time(),
                }
                is_eval = step % cfg.eval_interval == 0 or step == cfg.max_steps or self.stop_requested
                if is_eval:
                    if not _weights_finite(model):
                        log.write(json.dumps({**record, "nonfinite": True}) + "\n")
                        log.flush()
                        raise TrainingDiverged(
                            f"weights became non-finite after the update at step {step} (learning rate {lr:.3g}); "
                            f"not saved; last good checkpoint: {last_good or 'none yet'}",
                            step=step,
                            last_good=last_good,
                        )
                    losses = self.evaluate(model, {"train": train_data, "val": val_data})
                    record["val_loss"] = losses["val"]
                    record["eval_train_loss"] = losses["train"]
                    improved = losses["val"] < best_val
                    best_val = min(best_val, losses["val"])
                    payload = self._payload(model, optimizer, step, best_val, tokenizer, batch_gen)
                    save_checkpoint(ws.latest_checkpoint, payload)
                    last_good = str(ws.latest_checkpoint)
                    self._fire("on_checkpoint", str(ws.latest_checkpoint))
                    if improved:
                        save_checkpoint(ws.best_checkpoint, payload)
                        self._fire("on_checkpoint", str(ws.best_checkpoint))
                    summary["val_loss"] = losses["val"]
                    self._fire("on_eval", record)
                if is_eval or step % cfg.log_interval == 0:
                    log.write(json.dumps(record) + "\n")
                    log.flush()
                    self._fire("on_log", record)
                self._fire("on_step_end", record)
        summary.update(
            steps=step,
            best_val_loss=best_val,
            stopped_early=step < cfg.max_steps,
            seconds=time.perf_counter() - run_start,
        )
        return summary

    def _payload(self, model, optimizer, step, best_val, tokenizer, batch_gen) -> dict:
        return {
            "model_state_dict": model.state_dict(),
            "config": model.config.to_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "step": step,
            "best_val_loss": float(best_val),
            "tokenizer_fingerprint": tokenizer.fingerprint,
            "train_config": asdict(self.cfg),
            "rng_state": _rng_state(batch_gen),
        }

    def _archive_previous_run(self) -> Path | None:
        """A fresh run never overwrites an earlier one: its checkpoints and logs move to
        `<workspace>/previous/<time>/` first (use --resume to continue it instead)."""
        ws = self.ws
        old = [
            p
            for p in (ws.best_checkpoint, ws.latest_checkpoint, ws.metrics, ws.grads)
            if p.is_file() and p.stat().st_size > 0
        ]
        if not old:
            return None
        dest = ws.root / "previous" / time.strftime("%Y%m%d-%H%M%S")
        n = 1
        while dest.exists():
            dest, n = dest.with_name(f"{dest.name.split('.')[0]}.{n}"), n + 1
        for path in old:
            target = dest / path.relative_to(ws.root)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
        self._fire("on_archive", str(dest))
        return dest

    def _log_grads(self, model, step: int, norm_before_clip: float) -> None:
        rows, _ = grad_table(model)
        record = {
            "step": step,
            "global_norm": norm_before_clip,
            "clip": self.cfg.grad_clip,
            "rows": [{k: r[k] for k in ("name", "shape", "numel", "grad_norm", "weight_norm", "flags")} for r in rows],
        }
        with open(self.ws.grads, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")

    def _truncate_metrics(self, step: int) -> None:
        """Drop lines the interrupted run logged after the checkpoint we resume from."""
        if not self.ws.metrics.exists():
            return
        grads = self.ws.grads
        if grads.is_file():
            lines = [ln for ln in grads.read_text(encoding="utf-8").splitlines() if _step_of(ln) <= step]
            atomic_write_text("".join(ln + "\n" for ln in lines), grads)
        kept = []
        for line in self.ws.metrics.read_text(encoding="utf-8").splitlines():
            try:
                if json.loads(line).get("step", 0) <= step:
                    kept.append(line)
            except (json.JSONDecodeError, AttributeError):
                continue
        atomic_write_text("".join(ln + "\n" for ln in kept), self.ws.metrics)


def _step_of(line: str) -> float:
    try:
        return json.loads(line).get("step", 0)
    except (json.JSONDecodeError, AttributeError):
        return float("inf")


def _weights_finite(model: torch.nn.Module) -> bool:
    norms = torch._foreach_norm([p.detach() for p in model.parameters()])
    return bool(torch.isfinite(torch.stack(norms)).all())


def _json_float(x: float) -> float | str:
    # JSON has no NaN/Infinity: write them as strings the curve reader understands
    return x if math.isfinite(x) else str(x)
