"""Where in a model a dependence first appears, measured: run the model on two inputs that differ
only where the property allows no influence (tokens after t; another row of the batch), and find
the first module, in the order their forwards finish, whose output at the part that must not move
(positions 0..t; this row) moved. A per-position layer (a Linear, a norm over channels) only passes
on a change from upstream, so what is named then is its parent's own forward code."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from minigpt.checks import adapter

# layers that compute each position from that position alone: a change they pass on came in upstream
PER_POSITION = (nn.Linear, nn.Embedding, nn.LayerNorm, nn.RMSNorm, nn.Dropout, nn.GELU, nn.ReLU, nn.SiLU, nn.Identity)


def first_changed(
    model: nn.Module,
    a: torch.Tensor,
    b: torch.Tensor,
    part: Callable[[torch.Tensor], torch.Tensor | None],
) -> str | None:
    """The module where `part` of an output first differs between inputs `a` and `b`, in words;
    None where no module's output has such a part (a model that is one opaque forward), or none
    differs. `part(output)` picks what must not move, or None for an output without it."""
    names = {m: n for n, m in model.named_modules()}
    runs: list[list[tuple[nn.Module, torch.Tensor]]] = []
    for inputs in (a, b):
        seen: list[tuple[nn.Module, torch.Tensor]] = []

        def hook(module: nn.Module, _args: object, out: object, seen: list = seen) -> None:
            tensor = out[0] if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor) else out
            if isinstance(tensor, torch.Tensor):
                picked = part(tensor.detach())
                if picked is not None:
                    seen.append((module, picked.clone()))

        handles = [m.register_forward_hook(hook) for m in model.modules() if m is not model]
        try:
            with torch.no_grad():
                torch.manual_seed(0)  # dropout draws the same masks in both runs
                adapter.full_logits(model, inputs)
        finally:
            for h in handles:
                h.remove()
        runs.append(seen)
    for (module, before), (_, after) in zip(*runs):
        if before.shape == after.shape and not torch.allclose(before.float(), after.float(), atol=1e-6, rtol=1e-5):
            name = names.get(module, "?")
            if isinstance(module, PER_POSITION):
                where = name.rpartition(".")[0] or "the model itself"
                return f"the forward of {where} (its {type(module).__name__} {name} passes on a change made before it)"
            return f"{name} ({type(module).__name__})"
    return None
