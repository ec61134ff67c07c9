"""The torch modules some faults put into a model (imported only when such a fault is applied)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.model.contract import call


class AlwaysOnDropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, self.p, training=True)  # the bug: ignores self.training


class OutputFault(nn.Module):
    """Wraps a model and corrupts its output, keeping the (logits, loss) contract."""

    def __init__(self, inner: nn.Module, kind: str):
        super().__init__()
        self.inner, self.kind = inner, kind
        self.config = getattr(inner, "config", None)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits, loss = call(self.inner, idx, targets)
        if self.kind == "transposed_logits":
            return logits.transpose(1, 2), loss  # (B, V, T)
        if targets is not None:  # softmax_loss
            probs = F.softmax(logits, dim=-1)
            loss = F.cross_entropy(probs.reshape(-1, probs.size(-1)), targets.reshape(-1))
        return logits, loss


class LooseBias(nn.Module):
    """Wraps a model and adds a bias to its logits that is drawn at build time and held as a plain
    attribute: not a parameter or buffer, so never trained or saved."""

    def __init__(self, inner: nn.Module, vocab_size: int):
        super().__init__()
        self.inner = inner
        self.config = getattr(inner, "config", None)
        self.logit_bias = torch.randn(vocab_size) * 0.5  # the bug: a plain tensor attribute

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits, _ = call(self.inner, idx, targets)
        logits = logits + self.logit_bias.to(logits.device)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def mix_rows(_module: nn.Module, _inputs: tuple[object, ...], output: torch.Tensor) -> torch.Tensor:
    """A forward hook that adds the batch mean to every row: rows of a batch see each other."""
    return output + output.mean(dim=0, keepdim=True)
