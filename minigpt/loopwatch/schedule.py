"""Which optimizer steps a watch reads in full, and the hooks it holds for those steps only. A full reading (the
first DEEP_FIRST_STEPS steps and every `interval`-th) holds the probe parameter's before-accumulate hook; it and a
step that snapshots the weights (the first and every `grads_every`-th) hold the optimizer's step-pre hook. The other
steps read nothing before the update, and a hook not called costs nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

DEEP_FIRST_STEPS = 3  # steps always read in full at the start


class ReadingSchedule:
    """Says which steps are full readings and holds or lets go of the hooks each step's window needs
    (`on_step_pre` and `before_accumulate` come guarded: see `Watch._guard`)."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        interval: int,
        grads_every: int,
        on_step_pre: Callable,
        before_accumulate: Callable,
    ):
        self.optimizer = optimizer
        self.interval, self.grads_every = interval, grads_every
        self._on_step_pre, self._before_accumulate = on_step_pre, before_accumulate
        self.clear_hook: Any = None  # the probe's before-accumulate hook, held during full readings only
        self.pre_hook: Any = None  # the step-pre hook, held for the steps that read before the update only

    def is_deep(self, step: int) -> bool:
        """Is optimizer step `step` a full reading?"""
        return step <= DEEP_FIRST_STEPS or step % self.interval == 0

    def hold(self, step: int, deep: bool, probe: torch.Tensor | None) -> None:
        """Hold the hooks the window before step `step` needs, and let go of the others."""
        if not deep and self.pre_hook is None and self.clear_hook is None and step % self.grads_every:
            return  # the usual step: no hook to hold or to let go
        if deep or step == 1 or step % self.grads_every == 0:
            if self.pre_hook is None:
                self.pre_hook = self.optimizer.register_step_pre_hook(self._on_step_pre)
        elif self.pre_hook is not None:
            self.pre_hook.remove()
            self.pre_hook = None
        if deep and self.clear_hook is None and probe is not None:
            self.clear_hook = probe.register_hook(self._before_accumulate)
        elif not deep and self.clear_hook is not None:
            self.clear_hook.remove()
            self.clear_hook = None

    def remove(self) -> None:
        """Let go of both hooks."""
        if self.clear_hook is not None:
            self.clear_hook.remove()
            self.clear_hook = None
        if self.pre_hook is not None:
            self.pre_hook.remove()
            self.pre_hook = None
