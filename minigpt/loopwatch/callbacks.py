"""The watch where users' loops already are: a Hugging Face `TrainerCallback` and a Lightning
`Callback`. Each starts the same `Watch` when training begins, forwards the loop's own logs
(validation loss, ...) to `watch.log`, and closes it when training ends.

    trainer = transformers.Trainer(..., callbacks=[minigpt.loopwatch.callbacks.hf_callback("RUN")])
    trainer = lightning.Trainer(..., callbacks=[minigpt.loopwatch.callbacks.lightning_callback("RUN")])

The classes are built on first use, so importing this module needs neither library
(`pip install 'minigpt-tui[hf]'` / `'minigpt-tui[lightning]'`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from minigpt.loopwatch.watch import Watch

# keys of the libraries' log dicts, in the names our metrics log reads
_RENAMES = {"eval_loss": "val_loss", "val_loss": "val_loss", "loss": "loss", "train_loss": "loss"}
_SKIP = {"learning_rate", "lr", "epoch", "step", "grad_norm"}  # read by the watch itself


def _torch_optimizer(optimizer: Any) -> Any:
    """The torch optimizer inside a library's wrapper (accelerate's AcceleratedOptimizer,
    Lightning's LightningOptimizer): hooks go where `step()` really runs."""
    inner = getattr(optimizer, "optimizer", None)
    return inner if inner is not None and hasattr(inner, "param_groups") else optimizer


def _scalars(logs: dict) -> dict[str, float]:
    # the Trainer's end-of-training summary (train_runtime, ...) carries the mean loss of the whole
    # run as `train_loss`: kept under its own name, never a train loss at the last step
    summary = "train_runtime" in (logs or {})
    out = {}
    for key, value in (logs or {}).items():
        if key in _SKIP or isinstance(value, bool):
            continue
        if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
            value = value.item()
        if isinstance(value, int | float):
            name = "mean_train_loss" if summary and key == "train_loss" else _RENAMES.get(key, key.replace("/", "_"))
            out[name] = float(value)
    return out


class _FirstStepForwards:
    """Whether the watched module ran forward in the first training step, and which of its parent's
    children did: a `training_step` that calls `self.model(x)` runs the LightningModule's child, never
    the module itself, and the watch's hooks on it would see nothing."""

    def __init__(self, watched: Any, parent: Any):
        self.ran = 0
        self.children_ran: list[str] = []
        self._handles = [watched.register_forward_hook(self._count)]
        if parent is watched:
            self._handles += [child.register_forward_hook(self._note(name)) for name, child in parent.named_children()]
        self.done = False

    def _count(self, *_: object) -> None:
        self.ran += 1

    def _note(self, name: str) -> Callable[..., None]:
        def hook(*_: object) -> None:
            if name not in self.children_ran:
                self.children_ran.append(name)

        return hook

    def finish(self, watch: Watch, what: str, option: str) -> None:
        """At the end of the first step: remove the hooks; warn when the watched module never ran."""
        self.done = True
        for handle in self._handles:
            handle.remove()
        if self.ran or not watch.active:
            return
        name = self.children_ran[0] if self.children_ran else "model"
        ran = f" (its child {', '.join(self.children_ran)} did)" if self.children_ran else ""
        print(
            f"minigpt.watch: {what} never ran forward in the first training step{ran}, so the watch sees no "
            f"forward: the loop calls a submodule. Watch that one: {option.format(name=name)}",
            file=watch.stderr,
        )


def hf_callback(workspace: str | os.PathLike = ".", **options: Any) -> Any:
    """A `transformers.TrainerCallback` that watches the Trainer's loop into `workspace`."""
    import importlib

    TrainerCallback = importlib.import_module("transformers").TrainerCallback

    class MinigptWatchCallback(TrainerCallback):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.watch: Watch | None = None

        def on_train_begin(
            self,
            args: Any,
            state: Any,
            control: Any,
            model: Any = None,
            optimizer: Any = None,
            lr_scheduler: Any = None,
            **kwargs: Any,
        ) -> None:
            if model is not None and optimizer is not None:
                self.watch = Watch(model, _torch_optimizer(optimizer), workspace, scheduler=lr_scheduler, **options)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if self.watch is not None:
                self.watch.log(step=state.global_step, **_scalars(logs or {}))

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if self.watch is not None:
                self.watch.close()

    return MinigptWatchCallback()


def lightning_callback(workspace: str | os.PathLike = ".", *, module: str | None = None, **options: Any) -> Any:
    """A `lightning.pytorch.Callback` that watches `trainer.fit` into `workspace`. The watched model is
    the LightningModule, or its attribute `module` when `training_step` calls a submodule
    (`self.model(x)`) rather than `self(x)`; when the watched module ran no forward in the first
    training step, the callback says so on stderr and names the child that did."""
    import importlib

    try:
        Callback = importlib.import_module("lightning.pytorch").Callback
    except ImportError:  # the older package name
        Callback = importlib.import_module("pytorch_lightning").Callback

    class MinigptWatchCallback(Callback):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            self.watch: Watch | None = None
            self.first: _FirstStepForwards | None = None

        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            model = getattr(pl_module, module) if module else pl_module
            if trainer.optimizers:
                schedulers = getattr(trainer, "lr_scheduler_configs", None) or []
                scheduler = schedulers[0].scheduler if schedulers else None
                self.watch = Watch(
                    model, _torch_optimizer(trainer.optimizers[0]), workspace, scheduler=scheduler, **options
                )
                self.first = _FirstStepForwards(model, pl_module)

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if self.watch is not None and self.first is not None and not self.first.done:
                what = f"{type(pl_module).__name__}.{module}" if module else type(pl_module).__name__
                self.first.finish(self.watch, what, "lightning_callback(RUN, module='{name}')")

        def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
            if self.watch is not None and not trainer.sanity_checking:
                self.watch.log(step=trainer.global_step, **_scalars(dict(trainer.callback_metrics)))

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            if self.watch is not None:
                self.watch.close()

    return MinigptWatchCallback()
