"""Talking to any model that follows `forward(idx, targets=None) -> (logits, loss)`."""

from __future__ import annotations

import torch
import torch.nn as nn

from minigpt.model.contract import (  # noqa: F401  (re-exported)
    ModelContractError,
    accepts_targets,
    call,
    call_with_loss,
    config_lookup,
    config_value,
    forward_plan,
    hf_own_loss,
    unpack,
    wraps_transformers,
)


def full_logits(model: nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, str | None]:
    """Logits for every position. Models that return only the last position without targets
    (a common inference optimisation) are asked again with targets; that is noted, not failed."""
    logits, _ = call(model, idx)
    T = idx.shape[1]
    if logits.dim() == 3 and logits.shape[1] == 1 and T > 1:
        logits, _ = call(model, idx, idx)  # targets only to get every position's logits
        return (
            logits,
            "forward(idx) returns only the last position's logits; used forward(idx, targets) for all positions",
        )
    return logits, None


from minigpt.model.gradstats import grad_table  # noqa: E402,F401  (re-exported for the checks)
