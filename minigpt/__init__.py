"""minigpt: a clean character-level GPT pipeline and the check engine that inspects it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os

    import torch
    from torch import nn

    from minigpt.loopwatch.watch import Watch

__version__ = "0.1.0"


def watch(
    model: nn.Module, optimizer: torch.optim.Optimizer, workspace: str | os.PathLike = ".", **options: Any
) -> Watch:
    """Record your own training loop into the run folder `workspace` (one line after the model and
    optimizer exist); `minigpt check --workspace RUN` and `minigpt-tui --workspace RUN` then judge it.
    Options: `scheduler=`, `scaler=` (a GradScaler: judged exactly under float16), `interval=20`
    (steps between full readings and writes), `grads_every=100`, `lock=True`. Returns a
    `minigpt.loopwatch.watch.Watch`: call `.log(step=..., val_loss=...)` for what it cannot see and
    `.close()` at the end (also at interpreter exit, and when used as a context manager)."""
    from minigpt.loopwatch.watch import Watch

    return Watch(model, optimizer, workspace, **options)
