"""The checks' own AdamW takes exactly the steps torch.optim.AdamW takes."""

from __future__ import annotations

import pytest
import torch

from minigpt.checks.adamw import AdamW
from minigpt.model.gpt import MiniGPT, MiniGPTConfig


def assert_same_steps(ours, opt_ours, theirs, opt_theirs, steps: int = 20) -> None:
    """Both models take `steps` steps on one batch; every parameter ends where torch's puts it."""
    x = torch.randint(0, 50, (4, 16))
    y = torch.randint(0, 50, (4, 16))
    for _ in range(steps):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad(set_to_none=True)
            model(x, y)[1].backward()
            opt.step()
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_matches_torch_adamw_over_twenty_steps(weight_decay):
    cfg = MiniGPTConfig(vocab_size=50, block_size=16, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)
    torch.manual_seed(0)
    ours, theirs = MiniGPT(cfg), MiniGPT(cfg)
    theirs.load_state_dict(ours.state_dict())
    opt_ours = AdamW(ours.parameters(), lr=3e-3, weight_decay=weight_decay)
    opt_theirs = torch.optim.AdamW(theirs.parameters(), lr=3e-3, weight_decay=weight_decay, foreach=False)
    assert_same_steps(ours, opt_ours, theirs, opt_theirs)


def test_without_decay_on_1d_parameters_it_takes_the_trainers_steps():
    # GIVEN the trainer's optimizer (decay on 2-D weights only) and ours with decay_1d=False
    from minigpt.train.config import TrainConfig, make_optimizer

    cfg = MiniGPTConfig(vocab_size=50, block_size=16, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)
    torch.manual_seed(0)
    ours, theirs = MiniGPT(cfg), MiniGPT(cfg)
    theirs.load_state_dict(ours.state_dict())
    train = TrainConfig(learning_rate=3e-3, weight_decay=0.5, beta2=0.999)
    # the trainer's groups, stepped unfused (its fused kernel rounds differently, ~1e-5 after 20 steps)
    groups = [
        {k: v for k, v in g.items() if k in ("params", "weight_decay")}
        for g in make_optimizer(theirs, train).param_groups
    ]
    opt_theirs = torch.optim.AdamW(groups, lr=3e-3, foreach=False)
    opt_ours = AdamW(ours.parameters(), lr=3e-3, weight_decay=0.5, decay_1d=False)
    # WHEN both take twenty steps THEN every parameter, biases and LayerNorm weights included, is where
    # training puts it
    assert_same_steps(ours, opt_ours, theirs, opt_theirs)
