"""What a training run is asked to do: `TrainConfig` (model shape, schedule, optimizer, device,
dtype), its validation (types first: a checkpoint edited by hand must fail with a typed error), the
learning-rate schedule and the optimizer. Split from `minigpt.train.trainer`, which runs the loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import torch

from minigpt.errors import ConfigError
from minigpt.model.gpt import MiniGPTConfig
from minigpt.sample.values import seed_problem
from minigpt.train.option_ranges import FIELDS, require
from minigpt.train.presets import PRESETS

MODEL_FIELDS = {f.name for f in fields(MiniGPTConfig)} - {"vocab_size"}
INT_FIELDS = (
    "block_size",
    "embedding_dim",
    "num_heads",
    "num_layers",
    "expansion_factor",
    "batch_size",
    "grad_accum",
    "max_steps",
    "warmup_steps",
    "eval_interval",
    "eval_batches",
    "log_interval",
    "seed",
)
FLOAT_FIELDS = ("dropout", "learning_rate", "min_lr_ratio", "weight_decay", "beta2", "grad_clip")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
EVAL_TOKENS = 8192  # tokens per evaluation forward pass (at least one training batch)


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
    dtype: str = "float32"  # autocast dtype of forward/backward (float16 adds loss scaling); weights stay float32
    compile: bool = False  # torch.compile the model for the training steps (checkpoints keep plain keys)

    def __post_init__(self) -> None:
        # types first: a str or float from a hand-edited checkpoint must not reach a comparison
        for name in INT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{name.replace('_', '-')} must be an integer; found {value!r}")
        for name in FLOAT_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise ConfigError(f"{name.replace('_', '-')} must be a finite number; found {value!r}")
        problem = seed_problem(self.seed)
        if problem:
            raise ConfigError(f"seed must be {problem}")
        if not isinstance(self.device, str):
            raise ConfigError(f"device must be a string; found {self.device!r}")
        if self.dtype not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}; found {self.dtype!r}")
        if not isinstance(self.compile, bool):
            raise ConfigError(f"compile must be true or false; found {self.compile!r}")
        positive = ("batch_size", "grad_accum", "max_steps", "eval_interval", "eval_batches", "log_interval")
        for name in positive:
            value = getattr(self, name)
            if value < 1:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive integer; found {value!r}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning rate must be a positive number; found {self.learning_rate!r}")
        if self.warmup_steps < 0 or self.grad_clip < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError("warmup-steps and grad-clip must be >= 0, min_lr_ratio in [0, 1]")
        if self.weight_decay < 0 or not 0 <= self.beta2 < 1:
            raise ConfigError(f"weight_decay must be >= 0 and beta2 in [0, 1); found {self.weight_decay}, {self.beta2}")
        for name, flag in FIELDS.items():  # the flags' ranges hold for a checkpoint's values too
            if hasattr(self, name):
                require(flag, getattr(self, name))
        self.model_config(vocab_size=1)  # shape errors (heads not dividing the width, ...) now

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TrainConfig:  # field values; None: not given
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}")
        preset: dict[str, Any] = PRESETS[name]
        cfg = replace(cls(), **preset)
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
    # the fused kernel updates all parameters in one op, not one per tensor (docs/performance.md)
    fused = all(p.device.type in ("cpu", "cuda") for p in params)
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(0.9, cfg.beta2), fused=fused or None)
