"""The checks' own AdamW takes exactly the steps torch.optim.AdamW takes."""

from __future__ import annotations

import pytest
import torch

from minigpt.checks.adamw import AdamW
from minigpt.model.gpt import MiniGPT, MiniGPTConfig


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_torch_adamw_over_twenty_steps(weight_decay):
    cfg = MiniGPTConfig(vocab_size=50, block_size=16, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)
    torch.manual_seed(0)
    ours, theirs = MiniGPT(cfg), MiniGPT(cfg)
    theirs.load_state_dict(ours.state_dict())
    opt_ours = AdamW(ours.parameters(), lr=3e-3, weight_decay=weight_decay)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=3e-3, weight_decay=weight_decay, foreach=False)
    x = torch.randint(0, 50, (4, 16))
    y = torch.randint(0, 50, (4, 16))
    for _ in range(20):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad(set_to_none=True)
            model(x, y)[1].backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
