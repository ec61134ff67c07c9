"""Saving and loading checkpoints in the recipe's dict layout, safely and with typed errors.

A checkpoint is a dict of plain types and tensors: `model_state_dict`, `config`,
`optimizer_state_dict`, `step`, `best_val_loss`, `tokenizer_fingerprint`, plus `train_config` and
`rng_state` for exact resume. It is read by `minigpt.io.torch_files.load_torch_file`, which bounds
what the file may cost and unpickles with `weights_only=True`.

The model is built from the checkpoint's config by `minigpt.model.factory` (MiniGPT, or the
built-in class the config names, sized before a byte is allocated) or by the caller's factory.
What `--resume` needs of a checkpoint beyond this is checked in `minigpt.train.resume`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from minigpt.data.tokenizer_api import Tokenizer
from minigpt.errors import CheckpointError, ConfigError, ModelSpecError
from minigpt.io.atomic import atomic_torch_save
from minigpt.io.torch_files import TorchFileKind, load_torch_file
from minigpt.model.factory import ModelFactory, default_model_factory, require_buildable

KEY_PREFIXES = ("_orig_mod.", "module.")  # written by torch.compile and DistributedDataParallel


def save_checkpoint(path: str | os.PathLike, payload: dict) -> None:
    """Atomic save: a crash mid-write leaves the previous file intact."""
    atomic_torch_save(payload, path)


CHECKPOINT = TorchFileKind(
    title="Checkpoint",
    what="checkpoint",
    error=CheckpointError,
    interrupted="an interrupted save",
    missing=("no training run has saved here yet", "pass --checkpoint or --workspace"),
    unsafe_causes=(
        "it pickles custom classes or code (an unsafe or non-standard checkpoint)",
        "save plain dicts of tensors and numbers instead",
    ),
)


def read_checkpoint(path: str | os.PathLike, kind: TorchFileKind = CHECKPOINT) -> dict:
    """Read the checkpoint dict through `load_torch_file` (bounded, `weights_only=True`, never a
    fallback), or raise CheckpointError; `kind` names the file in refusals (a nanoGPT `ckpt.pt`)."""
    path = Path(path)
    data = load_torch_file(path, kind)
    if not isinstance(data, dict):
        raise CheckpointError(
            f"Not a checkpoint dict: {path} holds a {type(data).__name__}, expected a dict with "
            "'model_state_dict' and 'config'",
            path=path,
        )
    if "model_state_dict" not in data and "model" in data and isinstance(data.get("model_args"), dict):
        # nanoGPT's layout: weights under "model", the model config under "model_args"
        # (its "config" holds training hyperparameters, not the model's)
        best = data.get("best_val_loss")
        data = {
            **data,
            "model_state_dict": data["model"],
            "config": data["model_args"],
            "nanogpt_config": data.get("config"),  # train.py's settings, kept for the import and the curve
            "step": data.get("iter_num"),
            "optimizer_state_dict": data.get("optimizer"),
            "best_val_loss": float(best) if best is not None else None,
            "_layout": "read nanoGPT's checkpoint layout (model, model_args, iter_num)",
        }
    if "model_state_dict" not in data:
        looks_bare = data and all(isinstance(v, torch.Tensor) for v in data.values())
        raise CheckpointError(
            f"Checkpoint {path} has no 'model_state_dict' (keys: {sorted(map(str, data))[:8]})",
            path=path,
            causes=["this is a bare state_dict; wrap it as {'model_state_dict': sd, 'config': {...}}"]
            if looks_bare
            else ["written by a different training script"],
        )
    if not isinstance(data.get("config"), dict):
        raise CheckpointError(
            f"Checkpoint {path} has no 'config' dict (found {type(data.get('config')).__name__})",
            path=path,
            causes=["the model's hyperparameters were not saved with the weights"],
        )
    return data


def strip_prefixes(state_dict: dict) -> tuple[dict, list[str]]:
    """Remove `_orig_mod.` / `module.` key prefixes, in any nesting order; return the dict and notices."""
    notices = []
    stripped = True
    while stripped:
        stripped = False
        for prefix in KEY_PREFIXES:
            if state_dict and all(k.startswith(prefix) for k in state_dict):
                state_dict = {k[len(prefix) :]: v for k, v in state_dict.items()}
                origin = "torch.compile" if prefix == "_orig_mod." else "DistributedDataParallel/DataParallel"
                notices.append(f"stripped the '{prefix}' key prefix (written by {origin})")
                stripped = True
    return state_dict, notices


@dataclass
class StateDictMismatch:
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    size_mismatched: list[tuple[str, list[int], list[int]]] = field(default_factory=list)  # name, ckpt, model

    def __bool__(self) -> bool:
        return bool(self.missing or self.unexpected or self.size_mismatched)

    def describe(self) -> str:
        parts = []
        if self.missing:
            parts.append(f"missing {len(self.missing)}: {self.missing[:6]}")
        if self.unexpected:
            parts.append(f"unexpected {len(self.unexpected)}: {self.unexpected[:6]}")
        if self.size_mismatched:
            parts.append(
                "size mismatch: "
                + ", ".join(f"{n} checkpoint {c} vs model {m}" for n, c, m in self.size_mismatched[:6])
            )
        return "; ".join(parts)


def compare_state_dict(model: nn.Module, state_dict: dict) -> StateDictMismatch:
    own = model.state_dict()
    mismatch = StateDictMismatch(
        missing=sorted(set(own) - set(state_dict)), unexpected=sorted(set(state_dict) - set(own))
    )
    for name in sorted(set(own) & set(state_dict)):
        value = state_dict[name]
        if isinstance(value, torch.Tensor) and value.shape != own[name].shape:
            mismatch.size_mismatched.append((name, list(value.shape), list(own[name].shape)))
    return mismatch


@dataclass
class LoadedCheckpoint:
    path: str
    model: nn.Module
    config: dict
    step: int | None
    best_val_loss: float | None
    tokenizer_fingerprint: str | None
    raw: dict  # everything else in the file (optimizer state, RNG state, ...)
    notices: list[str] = field(default_factory=list)
    fingerprint_mismatch: str | None = None  # message when the tokenizer does not match


def first_nonfinite(state_dict: dict) -> str | None:
    """Describe the first tensor holding NaN or Inf (`"name (3 NaN, 0 Inf of 4096)"`), or None."""
    for name, value in state_dict.items():
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            finite = torch.isfinite(value)
            if not bool(finite.all()):
                nan = int(torch.isnan(value).sum())
                return f"{name} ({nan} NaN, {int((~finite).sum()) - nan} Inf of {value.numel()})"
    return None


def require_finite(state_dict: dict, path: object, *, use: str) -> None:
    """Refuse weights with NaN/Inf: they generate garbage and can never be a 'good' checkpoint."""
    bad = first_nonfinite(state_dict)
    if bad is not None:
        raise CheckpointError(
            f"Cannot {use} {path}: its weights are not finite; first bad tensor: {bad}",
            path=path,
            causes=[
                "training diverged before this checkpoint was saved (by another script)",
                "the file was edited or corrupted",
                "use an earlier checkpoint (for example one under previous/)",
            ],
        )


def _size_before_building(config: dict, data: dict, device: str | torch.device, path: object) -> None:
    """A 1 KB file whose config says num_layers=10000 must not allocate gigabytes first."""
    stored = sum(v.numel() for v in data["model_state_dict"].values() if isinstance(v, torch.Tensor))
    try:
        require_buildable(config, path, stored=stored, device=str(device))
    except ConfigError as exc:
        raise CheckpointError(f"Invalid model config in {path}: {exc.message}", path=path) from None


def build_model(config: dict, model_factory: ModelFactory | None, path: object) -> nn.Module:
    try:
        return (model_factory or default_model_factory)(dict(config))
    except ConfigError as exc:
        raise CheckpointError(f"Invalid model config in {path}: {exc.message}", path=path) from None
    except ModelSpecError as exc:
        raise CheckpointError(
            f"The config in {path} does not fit the given model class: {exc.message}",
            path=path,
            causes=["the checkpoint was written by another model class (check --model)"] + exc.causes,
        ) from None
    except TypeError as exc:
        raise CheckpointError(
            f"The model could not be built from the config in {path}: {exc}",
            path=path,
            causes=["the checkpoint was written for another model class (pass --model)"],
        ) from None


def load_checkpoint(
    path: str | os.PathLike,
    device: str | torch.device = "cpu",
    *,
    tokenizer: Tokenizer | None = None,
    model_factory: ModelFactory | None = None,
    data: dict | None = None,
) -> LoadedCheckpoint:
    """Build the model from the checkpoint's own config and load its weights strictly.
    `data` is what `read_checkpoint(path)` returned, when the caller has read it already."""
    data = read_checkpoint(path) if data is None else data
    state_dict, notices = strip_prefixes(dict(data["model_state_dict"]))
    if data.get("_layout"):
        notices.insert(0, data["_layout"])
    if model_factory is None or model_factory is default_model_factory:  # a config of ours: sized first
        _size_before_building(data["config"], {"model_state_dict": state_dict}, device, path)
    model = build_model(data["config"], model_factory, path)
    mismatch = compare_state_dict(model, state_dict)
    if mismatch:
        raise CheckpointError(
            f"Checkpoint {path} does not fit the model built from its config: {mismatch.describe()}",
            path=path,
            causes=[
                "the checkpoint was written by another architecture or vocabulary",
                "the config saved with it does not match the weights",
            ],
        )
    model.load_state_dict(state_dict, strict=True)
    model.to(device).eval()
    fp = data.get("tokenizer_fingerprint")
    result = LoadedCheckpoint(
        path=str(path),
        model=model,
        config=dict(data["config"]),
        step=data.get("step"),
        best_val_loss=data.get("best_val_loss"),
        tokenizer_fingerprint=fp,
        raw=data,
        notices=notices,
    )
    if tokenizer is not None:
        if fp is None:
            result.notices.append("checkpoint has no tokenizer_fingerprint: cannot confirm the tokenizer matches")
        elif fp != tokenizer.fingerprint:
            result.fingerprint_mismatch = (
                f"tokenizer fingerprint {tokenizer.fingerprint[:12]} does not match the checkpoint's "
                f"{str(fp)[:12]}: the model was trained with another vocabulary"
            )
        vocab = data["config"].get("vocab_size")
        # a vocabulary padded past the tokenizer (nanoGPT's 50304 for GPT-2's 50257) is the run's own
        # when the fingerprint says so; the extra rows are never sampled (generate's vocab_limit)
        padded = isinstance(vocab, int) and vocab > tokenizer.vocab_size and fp == tokenizer.fingerprint
        if padded:
            result.notices.append(
                f"the model's vocab_size {vocab} pads the tokenizer's {tokenizer.vocab_size}: the extra rows are "
                "never sampled"
            )
        elif vocab is not None and vocab != tokenizer.vocab_size and result.fingerprint_mismatch is None:
            result.fingerprint_mismatch = (
                f"tokenizer has {tokenizer.vocab_size} characters but the model's vocab_size is {vocab}"
            )
    return result
