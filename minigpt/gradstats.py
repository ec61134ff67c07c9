"""Per-parameter gradient statistics with batched ops and one host transfer."""

from __future__ import annotations

import torch
import torch.nn as nn

from .checks.values import GradRow


def grad_table(model: nn.Module) -> tuple[list[GradRow], float]:
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
        stats = (
            torch.stack(
                [
                    torch.stack(torch._foreach_norm(weights)).float(),
                    torch.stack(torch._foreach_norm(grads)).float(),
                ]
            )
            if named
            else torch.zeros(2, 0)
        )
        host = stats.cpu().tolist()  # one transfer
    rows: list[GradRow] = []
    total_sq = 0.0
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
        rows.append(
            {
                "name": name,
                "shape": list(p.shape),
                "numel": p.numel(),
                "grad_norm": None if missing else g_norm,
                "weight_norm": w_norm,
                "tied_with": [a for a in aliases[id(p)] if a != name],
                "flags": flags,
            }
        )
    return rows, total_sq**0.5
