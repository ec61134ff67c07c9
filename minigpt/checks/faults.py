"""Known bugs to inject (`--inject FAULT`), so a user can watch the right check fail and trust it.

Each fault names the check it exists to trip (`intended`) and the downstream checks that may
fail with it because they measure the same broken thing (`also_fails`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..errors import ConfigError
from ..modelio import call


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    intended: str
    also_fails: tuple[str, ...] = ()


FAULTS = {
    f.name: f
    for f in [
        Fault("no_shift", "targets equal inputs (the shift by one token was forgotten)", "batch_shift"),
        Fault("out_of_range_token", "one training ID equals vocab_size", "token_range", ("decoded_sample",)),
        Fault(
            "no_causal_mask",
            "attention without the causal mask: position t sees t+1",
            "causal_independence",
            ("initial_loss", "checkpoint_load", "generation_repetition"),
        ),
        Fault(
            "lr_too_high",
            "learning rate 0.1 for the optimizer and overfit checks",
            "optimizer_update",
            ("single_batch_overfit",),
        ),
        Fault("frozen_parameters", "one layer's parameters have requires_grad=False", "gradients"),
        Fault("wrong_architecture", "the checkpoint is loaded into a model twice as wide", "checkpoint_load"),
        Fault(
            "dropout_on",
            "dropout 0.2 that stays on in eval mode (F.dropout(training=True))",
            "eval_determinism",
            ("single_batch_overfit",),
        ),
        Fault("softmax_loss", "cross-entropy fed probabilities instead of logits", "single_batch_overfit"),
        Fault("transposed_logits", "logits returned as [B, V, T] instead of [B, T, V]", "forward_shapes"),
        Fault(
            "nan_weight",
            "one weight set to NaN",
            "nonfinite_localisation",
            ("forward_shapes", "checkpoint_load", "generation_repetition"),
        ),
    ]
}


class _AlwaysOnDropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, training=True)  # the bug: ignores self.training


class _OutputFault(nn.Module):
    """Wraps a model and corrupts its output, keeping the (logits, loss) contract."""

    def __init__(self, inner: nn.Module, kind: str):
        super().__init__()
        self.inner, self.kind = inner, kind
        self.config = inner.config

    def forward(self, idx, targets=None):
        logits, loss = call(self.inner, idx, targets)
        if self.kind == "transposed_logits":
            return logits.transpose(1, 2), loss  # (B, V, T)
        if targets is not None:  # softmax_loss
            probs = F.softmax(logits, dim=-1)
            loss = F.cross_entropy(probs.reshape(-1, probs.size(-1)), targets.reshape(-1))
        return logits, loss


def middle_weight_name(model: nn.Module) -> str:
    """A weight in the middle of the network (not the embeddings), for nan_weight / frozen_parameters."""
    names = [n for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n and "wte" not in n]
    if not names:
        names = [n for n, _ in model.named_parameters()]
    return names[len(names) // 2]


def apply_to_model(fault: str | None, model: nn.Module, *, fresh: bool) -> tuple[nn.Module, str | None]:
    """Apply a model-level fault; returns the (possibly wrapped) model and what was changed."""
    if fault == "no_causal_mask":
        flagged = [m for m in model.modules() if hasattr(m, "causal")]
        if not flagged:
            raise ConfigError(
                "--inject no_causal_mask needs attention modules with a `causal` attribute "
                "(the built-in MiniGPT); it cannot be injected into this model"
            )
        for m in flagged:
            m.causal = False
        return model, f"causal=False on {len(flagged)} attention modules"
    if fault == "frozen_parameters" and fresh:
        target = middle_weight_name(model).rsplit(".", 1)[0]
        frozen = [n for n, p in model.named_parameters() if n.rsplit(".", 1)[0] == target]
        for n, p in model.named_parameters():
            if n in frozen:
                p.requires_grad_(False)
        return model, f"froze {frozen}"
    if fault == "dropout_on":
        replaced = []
        for name, module in list(model.named_modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, nn.Dropout):
                    setattr(module, child_name, _AlwaysOnDropout(0.2))
                    replaced.append(f"{name}.{child_name}".lstrip("."))
        return model, f"always-on dropout 0.2 in {len(replaced)} places"
    if fault in ("softmax_loss", "transposed_logits") and fresh:
        return _OutputFault(model, fault), fault
    if fault == "nan_weight":
        name = middle_weight_name(model)
        with torch.no_grad():
            dict(model.named_parameters())[name].view(-1)[0] = float("nan")
        return model, f"NaN in {name}"
    return model, None
