"""Talking to any model that follows `forward(idx, targets=None) -> (logits, loss)`, the way
people actually write it: a tuple, bare logits, a dict or an object with `.logits`; a config that
is a dataclass, an object or a dict. Shared by generation and the check engine."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelContractError(Exception):
    """The model's forward or config does not follow the contract."""


def config_value(model: nn.Module, name: str) -> int:
    config = getattr(model, "config", None)
    value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    if value is None:
        raise ModelContractError(f"model.config.{name} is missing: it is needed to build inputs")
    return int(value)


def unpack(out) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, loss) from whatever forward returned."""
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0], (out[1] if len(out) > 1 else None)
    if isinstance(out, dict) and "logits" in out:
        return out["logits"], out.get("loss")
    if hasattr(out, "logits"):
        return out.logits, getattr(out, "loss", None)
    raise ModelContractError(f"forward returned {type(out).__name__}; expected (logits, loss) or logits")


def call(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None, notes: list[str] | None = None):
    """Run forward and return (logits, loss). A model that returns no loss gets the standard
    cross-entropy on its logits (noted in `notes`), so logits-only models can be checked too."""
    logits, loss = unpack(model(idx, targets) if targets is not None else model(idx))
    if targets is not None and loss is None and logits.dim() == 3 and logits.shape[:2] == targets.shape:
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        if notes is not None:
            notes.append("forward returned no loss: used F.cross_entropy on its logits")
    return logits, loss
