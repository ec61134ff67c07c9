"""`call_with_loss`: where a check needs a loss (to step an optimizer, to average), a forward that
returns none gets the cross-entropy of its logits, and one whose logits cannot stand in is refused
with the contract's error, never a bare `'NoneType' has no attribute 'backward'`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minigpt.model.contract import ModelContractError, call_with_loss

V = 11


class LogitsOnly(nn.Module):
    """forward(idx) -> logits, no targets parameter, no loss."""

    def __init__(self, drop_last: bool = False):
        super().__init__()
        self.emb = nn.Embedding(V, V)
        self.drop_last = drop_last

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        logits = self.emb(idx)
        return logits[:, :-1] if self.drop_last else logits


def test_a_logits_only_forward_gets_the_cross_entropy_of_its_logits():
    model = LogitsOnly()
    x, y = torch.randint(0, V, (2, 5)), torch.randint(0, V, (2, 5))
    notes: list[str] = []
    logits, loss = call_with_loss(model, x, y, notes)
    assert torch.allclose(loss, F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)))
    assert notes == ["forward takes no targets: used F.cross_entropy on its logits"]


def test_logits_that_do_not_match_the_targets_are_refused_naming_both_shapes():
    model = LogitsOnly(drop_last=True)  # one position short: no loss can be computed against (B, T)
    x, y = torch.randint(0, V, (2, 5)), torch.randint(0, V, (2, 5))
    with pytest.raises(
        ModelContractError, match=r"no loss, and its logits \[2, 4, 11\] do not match the targets \[2, 5\]"
    ):
        call_with_loss(model, x, y)
