"""Per-parameter gradient statistics with batched ops and one host transfer."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn as nn

from minigpt.model.grad_row import GradRow


def grad_flags(requires_grad: bool, grad_norm: float | None) -> list[str]:
    """One parameter's gradient flags (`grad_norm` None: it got no gradient), the same in every gradient
    table: the gradients check's, the trainer's logs/grads.jsonl, the watch's."""
    if not requires_grad:
        return ["frozen"]
    if grad_norm is None:
        return ["no_grad"]
    if not math.isfinite(grad_norm):
        return ["nonfinite"]
    return ["zero"] if grad_norm == 0.0 else []


def grad_table(model: nn.Module) -> tuple[list[GradRow], float]:
    """Per-parameter rows (name, shape, numel, grad_norm, weight_norm, flags) and the global norm.

    Norms come from batched `tensor_norms` and one host transfer, not a `.item()` per
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
                    torch.stack(tensor_norms(weights)).float(),
                    torch.stack(tensor_norms(grads)).float(),
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
        flags = grad_flags(p.requires_grad, None if missing else g_norm)
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


def tensor_norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor, in one batched kernel. torch has no public per-tensor form;
    `clip_grad_norm_` uses this same op, so the norms match the clip's bit for bit."""
    return list(torch._foreach_norm(tensors)) if tensors else []


def total_norm(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all `tensors` taken together, as `clip_grad_norm_` computes it (the norm of
    the per-tensor norms, bit for bit), without `get_total_norm`'s grouping and a device move per
    tensor when they share one device."""
    try:
        return torch.linalg.vector_norm(torch.stack(tensor_norms(tensors)))
    except RuntimeError:  # tensors on several devices: torch groups them
        return torch.nn.utils.get_total_norm(tensors)


class RowParam(NamedTuple):
    """What a grads.jsonl row says of a parameter beyond its norms, read once per run."""

    name: str
    param: torch.nn.Parameter
    shape: list[int]
    numel: int


def row_params(named_params: list[tuple[str, torch.nn.Parameter]]) -> list[RowParam]:
    """Names, shapes and sizes for `grad_rows`, read once: a trained parameter keeps its shape
    (the optimizer's state is shaped like it), and reading them per logged step was most of its cost."""
    return [RowParam(name, p, [*p.shape], p.numel()) for name, p in named_params]


def grad_rows(params: list[RowParam], grad_norms: Sequence[float | None], weight_norms: Sequence[float]) -> list[dict]:
    """grads.jsonl rows from norms already on the host, both in `params` order (`grad_norms`
    before the clip, None for a parameter that got no gradient), flagged by `grad_flags`."""
    rows = []
    for (name, p, shape, numel), g_norm, w_norm in zip(params, grad_norms, weight_norms, strict=True):
        flags = grad_flags(p.requires_grad, g_norm)  # live: a callback may freeze a layer mid-run
        row_norm: float | str | None = g_norm
        if flags == ["nonfinite"]:
            row_norm = str(g_norm)  # JSON has no NaN/Infinity
        rows.append(
            {
                "name": name,
                "shape": shape[:],  # a copy: a caller may edit its rows
                "numel": numel,
                "grad_norm": row_norm,
                "weight_norm": w_norm,
                "flags": flags,
            }
        )
    return rows
