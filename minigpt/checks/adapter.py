"""Talking to any model that follows `forward(idx, targets=None) -> (logits, loss)`."""

from __future__ import annotations

import torch
import torch.nn as nn


class ModelContractError(Exception):
    """The model's forward does not follow the (logits, loss) contract."""


def config_value(model: nn.Module, name: str) -> int:
    config = getattr(model, "config", None)
    value = config.get(name) if isinstance(config, dict) else getattr(config, name, None)
    if value is None:
        raise ModelContractError(f"model.config.{name} is missing: the checks need it to build inputs")
    return int(value)


def call(model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None):
    """Run forward and return (logits, loss) from a tuple, a tensor, a dict or an object with .logits."""
    out = model(idx, targets) if targets is not None else model(idx)
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0], (out[1] if len(out) > 1 else None)
    if isinstance(out, dict) and "logits" in out:
        return out["logits"], out.get("loss")
    if hasattr(out, "logits"):
        return out.logits, getattr(out, "loss", None)
    raise ModelContractError(
        f"forward returned {type(out).__name__}; expected (logits, loss) or logits"
    )


def full_logits(model: nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """Logits for every position. Models that return only the last position without targets
    (a common inference optimisation) are asked again with targets; that is noted, not failed."""
    logits, _ = call(model, idx)
    T = idx.shape[1]
    if logits.dim() == 3 and logits.shape[1] == 1 and T > 1:
        logits, _ = call(model, idx, idx)  # targets only to get every position's logits
        return logits, "forward(idx) returns only the last position's logits; used forward(idx, targets) for all positions"
    return logits, None


from ..gradstats import grad_table  # noqa: E402,F401  (re-exported for the checks)
