"""The AdamW update the checks take, written out (Loshchilov & Hutter's decoupled weight decay, as
`torch.optim.AdamW` computes it with its defaults).

Why not `torch.optim.AdamW`: constructing any `torch.optim` optimizer imports `torch._dynamo` on
first use (its `add_param_group` is wrapped in `torch._disable_dynamo`), about 1.2 s on a 2-core
machine: more than the whole check suite otherwise takes. The checks take at most a few hundred
steps on a debug-size model, where these few lines are as fast. A test compares the two.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch


class AdamW:
    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
        decay_1d: bool = True,  # False: no decay on biases, norm weights, other 1-D parameters (as training does)
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.decay_1d = decay_1d
        self.state: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.steps = 0

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        b1, b2 = self.betas
        bias1, bias2 = 1 - b1**self.steps, 1 - b2**self.steps
        for p in self.params:
            if p.grad is None:
                continue
            if id(p) not in self.state:
                self.state[id(p)] = (torch.zeros_like(p), torch.zeros_like(p))
            m, v = self.state[id(p)]
            g = p.grad
            if self.decay_1d or p.dim() >= 2:
                p.mul_(1 - self.lr * self.weight_decay)
            m.lerp_(g, 1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bias2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-self.lr / bias1)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()
