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


@torch.no_grad()
def weight_norms(params: list[torch.Tensor]) -> list[float]:
    return torch.stack(torch._foreach_norm(params)).tolist() if params else []


def grad_table(model: nn.Module) -> tuple[list[dict], float]:
    """Per-parameter rows (name, shape, numel, grad_norm, weight_norm, flags) and the global norm.

    Norms come from batched `_foreach_norm` and one host transfer, not a `.item()` per
    parameter (each of which is a device sync on a GPU). Tied weights appear once, with aliases.
    """
    aliases: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        aliases.setdefault(id(p), []).append(name)
    named = list(model.named_parameters())
    with torch.no_grad():
        weights = [p.detach() for _, p in named]
        grads = [p.grad.detach() if p.grad is not None else torch.zeros((), device=p.device) for _, p in named]
        stats = torch.stack([
            torch.stack(torch._foreach_norm(weights)).float(),
            torch.stack(torch._foreach_norm(grads)).float(),
        ]) if named else torch.zeros(2, 0)
        host = stats.cpu().tolist()  # one transfer
    rows, total_sq = [], 0.0
    for i, (name, p) in enumerate(named):
        w_norm, g_norm = host[0][i], host[1][i]
        missing = p.grad is None
        flags = []
        if not p.requires_grad:
            flags.append("frozen")
        elif missing:
            flags.append("no_grad")
        elif g_norm != g_norm or g_norm in (float("inf"), float("-inf")):
            flags.append("nonfinite")
        elif g_norm == 0.0:
            flags.append("zero")
        if not missing and g_norm == g_norm:
            total_sq += g_norm * g_norm
        rows.append({
            "name": name, "shape": list(p.shape), "numel": p.numel(),
            "grad_norm": None if missing else g_norm, "weight_norm": w_norm,
            "tied_with": [a for a in aliases[id(p)] if a != name], "flags": flags,
        })
    return rows, total_sq ** 0.5
