"""Where non-finite values first appear: forward hooks on every module name the first one whose
output holds NaN or +inf (also used by the overfit check when its loss blows up)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn

from minigpt.checks import adapter
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status, name_list


def localise_nonfinite(model: nn.Module, x: torch.Tensor, y: torch.Tensor | None = None) -> dict:
    """Run forward with hooks on every module; return the first module (by execution order) whose
    output holds NaN or +inf, and every non-finite parameter. `-inf` alone is taken as a mask."""
    found: list[tuple[str, str]] = []
    handles = []

    def make_hook(name: str) -> Callable[[nn.Module, tuple[object, ...], object], None]:
        def hook(module: nn.Module, _inp: tuple[object, ...], out: object) -> None:
            if found:
                return
            tensors = (
                [out]
                if isinstance(out, torch.Tensor)
                else [t for t in (out if isinstance(out, (tuple, list)) else []) if isinstance(t, torch.Tensor)]
            )
            for t in tensors:
                if t.is_floating_point() and (torch.isnan(t).any() or torch.isposinf(t).any()):
                    found.append((name, type(module).__name__))
                    return

        return hook

    bad_params = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    try:
        for name, module in model.named_modules():
            if name:
                handles.append(module.register_forward_hook(make_hook(name)))
        with torch.no_grad():
            logits, loss = adapter.call(model, x, y)
    finally:
        for h in handles:
            h.remove()
    return {
        "first_module": found[0][0] if found else None,
        "module_type": found[0][1] if found else None,
        "nonfinite_parameters": bad_params,
        "logits_finite": bool(torch.isfinite(logits).all()),
        "loss": None if loss is None else loss.item(),
    }


@check("nonfinite_localisation", "model", "No module produces NaN/inf (first offender named)", depends=("token_range",))
def nonfinite_localisation(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    inspected = ctx.inspected_model()
    model, source = inspected.model.eval(), inspected.label
    # the context of the config the model was built from; a model whose own config names a shorter
    # one (a checkpoint's) gets that
    declared = adapter.config_lookup(getattr(model, "config", None), "block_size")
    if isinstance(declared, int) and not isinstance(declared, bool):
        T = min(T, declared)
    x, y = ctx.batch(B, T)
    result = localise_nonfinite(model, x, y)
    result["model"] = source
    if result["first_module"] or result["nonfinite_parameters"] or not result["logits_finite"]:
        where = (
            f"first non-finite output: {result['first_module']} ({result['module_type']})"
            if result["first_module"]
            else "outputs finite"
        )
        params = (
            f"; non-finite parameters: {name_list(result['nonfinite_parameters'])}"
            if result["nonfinite_parameters"]
            else ""
        )
        raise Outcome(
            Status.FAIL,
            f"{where}{params} [{source}]",
            values=result,
            causes=[
                "a NaN/inf weight (saved after divergence, or a bad init)",
                "an overflow in that module (fp16, exp of large values, division by ~0)",
                "a learning rate so high the weights blew up",
            ],
            fixes=[
                "inspect that module's inputs and weights",
                "load the last good checkpoint",
                "lower the learning rate and enable gradient clipping",
            ],
        )
    return f"every module's output is finite on one batch [{source}]", result
