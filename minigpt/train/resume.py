"""What `minigpt train --resume` restores besides the weights, checked before it is trusted: the run's
settings (saved, then the flags given now), every rank's generator states, the optimizer's state."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from minigpt.errors import CheckpointError, ConfigError
from minigpt.model.checkpoint import require_finite
from minigpt.model.factory import MINIGPT_CLASS, model_class_name
from minigpt.train.config import MODEL_FIELDS, TRAIN_FIELDS, TrainConfig
from minigpt.train.distributed import World


def rng_state(batch_gen: torch.Generator) -> dict:
    state: dict[str, Any] = {"batch": batch_gen.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict, batch_gen: torch.Generator) -> None:
    batch_gen.set_state(state["batch"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def rank_rng_state(raw: dict, world: World, seed: int) -> tuple[dict, str | None]:
    """This rank's generator states from a checkpoint, and a notice when they cannot reproduce the
    original run: another world size gets rank 0's (batches then differ from an uninterrupted run,
    which only the same world size reproduces exactly)."""
    saved_world = raw.get("world_size", 1)
    states = raw.get("rng_states")
    if saved_world == world.size and world.distributed:
        if not (isinstance(states, list) and len(states) == world.size and isinstance(states[0], dict)):
            raise ValueError(f"rng_states should hold {world.size} generator states")
        return states[world.rank], None
    notice = None
    if saved_world != world.size and world.is_main:
        notice = (
            f"the checkpoint was written by {saved_world} process(es) and this run has {world.size}: "
            "training continues, but on other batches than the original run would have drawn"
        )
    state = dict(raw["rng_state"])
    if world.rank:  # a distinct batch stream per rank
        state["batch"] = torch.Generator().manual_seed(seed + raw["step"] + world.rank).get_state()
    return state, notice


def resumed_config(cfg: TrainConfig, raw: dict, overrides: dict, path: Path) -> tuple[TrainConfig, str | None]:
    """The saved run's settings, then the flags given now; the model shape is the checkpoint's. With a
    notice naming every saved setting a flag overrides."""
    ignored = sorted(k for k in overrides if k in MODEL_FIELDS)
    if ignored:
        raise ConfigError(f"--resume keeps the checkpoint's model shape; drop {', '.join(ignored)}")
    saved = {k: v for k, v in (raw.get("train_config") or {}).items() if k in TRAIN_FIELDS}
    shape = {k: v for k, v in raw["config"].items() if k in MODEL_FIELDS}
    changed = [f"--{k.replace('_', '-')} {saved[k]!r} -> {v!r}" for k, v in overrides.items() if saved.get(k, v) != v]
    notice = f"--resume overrides the saved settings: {', '.join(changed)}" if changed else None
    try:
        return replace(cfg, **{**saved, **shape, **overrides, "device": cfg.device}), notice
    except ConfigError as exc:
        raise CheckpointError(
            f"cannot resume from {path}: its train_config/config is invalid: {exc.message}",
            path=path,
            causes=["the file was edited or written by another script"],
        ) from None


def check_optimizer_state(optimizer: torch.optim.Optimizer) -> None:
    """load_state_dict accepts wrong shapes and types that only fail at the next step: find them now."""
    for i, group in enumerate(optimizer.param_groups):
        for key in ("lr", "eps", "weight_decay"):
            value = group.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"param_groups[{i}].{key} is {value!r}, expected a number")
        betas = group.get("betas")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2 and all(isinstance(b, float) for b in betas)):
            raise TypeError(f"param_groups[{i}].betas is {betas!r}, expected two floats")
        for p in group["params"]:
            for name, value in optimizer.state.get(p, {}).items():
                if name in ("exp_avg", "exp_avg_sq") and (
                    not isinstance(value, torch.Tensor) or value.shape != p.shape
                ):
                    shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                    raise ValueError(f"state {name} is {shape} for a parameter of shape {list(p.shape)}")


def require_resumable(raw: dict, path: Path) -> None:
    """A checkpoint `minigpt train` wrote, with everything an exact resume needs, its weights finite."""
    require_minigpt(raw, path)  # an imported nanoGPT run, say: our trainer trains MiniGPT only
    missing = [k for k in ("optimizer_state_dict", "rng_state", "step") if raw.get(k) is None]
    if missing:
        raise CheckpointError(
            f"cannot resume from {path}: it has no {', '.join(missing)} (not written by `minigpt train`)",
            path=path,
            causes=["the checkpoint comes from another training script"],
        )
    validate_resume_fields(raw, path)
    require_finite(raw["model_state_dict"], path, use="resume from")


def load_optimizer_state(optimizer: torch.optim.Optimizer, raw: dict, path: Path) -> None:
    try:
        optimizer.load_state_dict(raw["optimizer_state_dict"])
        check_optimizer_state(optimizer)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError) as exc:
        raise CheckpointError(
            f"cannot resume from {path}: optimizer_state_dict does not fit the model: {str(exc)[:200]}",
            path=path,
            causes=["the file was edited, or written by another optimizer setup"],
        ) from None


def restore_rng_state(raw: dict, world: World, seed: int, batch_gen: torch.Generator, path: Path) -> str | None:
    """Set this rank's generators from the checkpoint; the notice `rank_rng_state` gives, if any."""
    try:
        state, notice = rank_rng_state(raw, world, seed)
        set_rng_state(state, batch_gen)
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CheckpointError(
            f"cannot resume from {path}: rng_state is not a saved generator state: {str(exc)[:200]}",
            path=path,
        ) from None
    return notice


def require_minigpt(data: dict, path: object) -> None:
    """`minigpt train` trains MiniGPT: a checkpoint of another class (an imported nanoGPT run) cannot be resumed."""
    config = data.get("config")
    name = model_class_name(config)
    if name != MINIGPT_CLASS:
        imported = data.get("imported_from")
        origin = f" (imported from {imported.get('format')})" if isinstance(imported, dict) else ""
        raise CheckpointError(
            f"cannot resume from {path}: it holds a {str(name)[:100]}{origin}, and `minigpt train` trains MiniGPT only",
            path=path,
            causes=[
                "continue training it with the tool that wrote it (nanoGPT's train.py)",
                "or start a fresh MiniGPT run on the same data: minigpt train (the imported checkpoint moves to "
                "previous/)",
            ],
        )


def validate_resume_fields(data: dict, path: object) -> None:
    """Types of what `--resume` restores from a MiniGPT checkpoint (`require_minigpt` first), checked
    before any of it is used: a hand-edited or foreign file must give a typed error naming the field,
    not a TypeError mid-setup."""

    def bad(field_name: str, expected: str, value: object) -> CheckpointError:
        found = f"{type(value).__name__} {value!r}"[:120]
        return CheckpointError(
            f"cannot resume from {path}: '{field_name}' should be {expected}; found {found}",
            path=path,
            causes=["the file was edited or written by another training script"],
        )

    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise bad("step", "a non-negative integer", step)
    best = data.get("best_val_loss")
    if best is not None and (isinstance(best, bool) or not isinstance(best, (int, float)) or best != best):
        raise bad("best_val_loss", "a number (or absent)", best)
    train_config = data.get("train_config")
    if train_config is not None and not isinstance(train_config, dict):
        raise bad("train_config", "a dict", train_config)
    rng = data.get("rng_state")
    if not isinstance(rng, dict):
        raise bad("rng_state", "a dict with 'batch' and 'torch' generator states", rng)
    for key in ("batch", "torch"):
        value = rng.get(key)
        if not isinstance(value, torch.Tensor) or value.dtype != torch.uint8:
            raise bad(f"rng_state.{key}", "a uint8 generator-state tensor", value)
    opt = data.get("optimizer_state_dict")
    if not isinstance(opt, dict) or not isinstance(opt.get("state"), dict):
        raise bad("optimizer_state_dict", "a dict with 'state' and 'param_groups'", opt)
    groups = opt.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups
    ):
        raise bad("optimizer_state_dict.param_groups", "a list of dicts with a 'params' list", groups)
