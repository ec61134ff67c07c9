"""Talking to any model that follows `forward(idx, targets=None) -> (logits, loss)`, the way
people actually write it: a tuple, bare logits, a dict or an object with `.logits`; a config that
is a dataclass, an object or a dict. Shared by generation and the check engine."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelContractError(Exception):
    """The model's forward or config does not follow the contract."""


# the names other codebases give the same config fields (recipe, nanoGPT, GPT-2/HF, Llama)
CONFIG_ALIASES = {
    "block_size": (
        "block_size", "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_len", "context_length",
    ),
    "vocab_size": ("vocab_size", "n_vocab", "num_tokens"),
}  # fmt: skip


def config_lookup(config: object, name: str) -> object | None:
    """`name` (or one of its aliases) from a config that is a dict, a dataclass or any object."""
    for key in CONFIG_ALIASES.get(name, (name,)):
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if value is not None:
            return value
    return None


def config_value(model: nn.Module, name: str) -> int:
    value = config_lookup(getattr(model, "config", None), name)
    if value is None:
        names = " / ".join(CONFIG_ALIASES.get(name, (name,)))
        raise ModelContractError(f"model.config has no {names}: it is needed to build inputs")
    return int(value)  # type: ignore[call-overload]


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
    takes_targets = targets is not None and accepts_targets(model)
    logits, loss = unpack(model(idx, targets) if takes_targets else model(idx))
    if targets is not None and loss is None and logits.dim() == 3 and logits.shape[:2] == targets.shape:
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        if notes is not None:
            notes.append("forward returned no loss: used F.cross_entropy on its logits")
    return logits, loss


def accepts_targets(model: nn.Module) -> bool:
    """Whether forward takes a second argument: `forward(self, x)` models get only the inputs (and
    the standard cross-entropy on their logits)."""
    import inspect

    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):  # a builtin or C-implemented forward: assume the contract
        return True
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        return True
    return len([p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]) >= 2
