"""`minigpt.watch(model, optimizer)`: records any PyTorch training loop through public hooks.

What it sees, and how (no monkey-patching, no private API):

- each forward of `model` (`register_forward_hook`, which sees the call's arguments): train or eval
  mode, whether gradients are enabled, autocast, the batch's fingerprint, how targets relate to
  the inputs, the model's own loss;
- each backward: a hook on the logits' gradient (how much of a mean cross-entropy it carries:
  see `probes.loss_weight`) and, on a few probe parameters, a hook before the gradient is
  accumulated (were the gradients cleared?) and one after (`register_post_accumulate_grad_hook`);
- each optimizer step (`register_step_post_hook`; `register_step_pre_hook` held only before full
  readings and the `grads_every` steps, the steps that read before the update): learning rates,
  gradient norms as the step sees them, parameters with gradients outside every group, update
  sizes, memory, and whether earlier steps' graphs are still alive.

Numbers stay on the device until a flush (at the first full reading a second or more after the last
one, and at `log()`/`close()`), which moves them to the host in one transfer. The full readings (the
loss weight, gradient norms, whether the gradients were cleared, batches and targets, memory, graphs
kept alive) are taken on the first three steps and every `interval`-th step. On the other steps a
hook only notes what it sees (modes, tokens, the loss tensor, learning rates, whether gradients
reached the step) and the flush turns those notes into log lines: hook code runs cold, between the
loop's kernels, and costs several times what the same lines cost in the flush's loop. An exception
inside the watch is reported once and turns the watch off: the training goes on.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import torch
import torch.nn as nn

from minigpt.io.workspace import Workspace
from minigpt.loopwatch import probes
from minigpt.loopwatch.describe import as_float, describe_run, memory_in_use, param_names, rank_and_world
from minigpt.loopwatch.full_reading import KeptGraphs, gradients_at_step, read_batch, window_record
from minigpt.loopwatch.loss_weights import DeferredLossWeights
from minigpt.loopwatch.ownership import adopt
from minigpt.loopwatch.runlog import RunLog
from minigpt.loopwatch.samples import WatchSamples
from minigpt.loopwatch.schedule import DEEP_FIRST_STEPS, ReadingSchedule
from minigpt.loopwatch.steps import Forward, LightStep, UpdateSnapshot, Window, host_records

FLUSH_SECONDS = 1.0  # a full reading writes what is buffered when this much time has passed since the last write


class Watch:
    """Records a training loop into a run folder. Use `minigpt.watch(...)` to make one."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        workspace: str | os.PathLike = ".",
        *,
        scheduler: object | None = None,
        scaler: object | None = None,
        interval: int = 20,
        grads_every: int = 100,
        lock: bool = True,
        tokenizer: str | os.PathLike | None = None,
        sample_every: int = 200,
        stderr: TextIO | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"minigpt.watch: model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"minigpt.watch: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
        if int(interval) < 1 or int(grads_every) < 1 or int(sample_every) < 1:
            raise ValueError("minigpt.watch: interval, grads_every and sample_every must be at least 1")
        self.model, self.optimizer = model, optimizer
        self.scheduler, self.scaler = scheduler, scaler
        self.interval, self.grads_every = int(interval), int(grads_every)
        self.sample_every = int(sample_every)
        self.samples: WatchSamples | None = None  # with `tokenizer=`: samples by step (rank 0)
        self._val_loss: tuple[int, float] | None = None  # the last logged validation loss, with its step
        self.ws = Workspace(Path(workspace))
        self.stderr = stderr if stderr is not None else sys.stderr
        self.step = 0
        self.active = True
        self.closed = False
        self.pid = os.getpid()  # the process that opened the watch: only it writes, closes or releases it
        self._handles: list[Any] = []
        self._pending: list[dict | LightStep] = []  # records whose tensors are still on the device
        guarded = self._guard(self._on_step_pre), self._guard(self._before_accumulate)
        self._schedule = ReadingSchedule(optimizer, self.interval, self.grads_every, *guarded)
        self._graphs = KeptGraphs()
        self._fingerprint = probes.Fingerprinter()
        self._started = time.time()
        self._t_last = time.perf_counter()
        self._t_flushed = self._t_last  # perf_counter of the last write of buffered records
        self._snapshot: UpdateSnapshot | None = None  # taken before a `grads_every` step's update
        self._step_reading: dict[str, Any] = {}
        self._weights = DeferredLossWeights()  # the full readings' loss weights, computed at the write
        self._logged_loss = False  # the user passes `loss=` to log(): the metrics take that
        self._model_loss_seen = False  # the model returns its loss: a logged `loss=` is kept apart
        self._count_on_logits = False  # the probe parameter gets no gradient: count backwards at the logits
        self._device_type = "cpu"
        self._opt_params: list[torch.Tensor] = []
        self._outside: list[torch.Tensor] = []  # the model's parameters in no group of the optimizer
        self.rank, self.world_size = rank_and_world()
        self.names = param_names(model)
        self._model_params = list(model.parameters())  # as at the start (read at every full reading)
        self._window = Window(deep=True)
        self.log_writer: RunLog | None = None
        try:
            self.log_writer = RunLog(self.ws, rank=self.rank, lock=lock)
            header = describe_run(
                model,
                optimizer,
                names=self.names,
                started=self._started,
                scheduler=None if scheduler is None else type(scheduler).__qualname__,
                scaler=scaler is not None,
                rank=self.rank,
                world_size=self.world_size,
                interval=self.interval,
                grads_every=self.grads_every,
            )
            self.log_writer.start(header)
            self._install()
        except Exception as exc:  # never break the user's run: say so once and stay off
            self._fail(exc, "starting")
        if tokenizer is not None and self.active and self.rank == 0 and self.log_writer is not None:
            self.samples = WatchSamples(self.log_writer, self.sample_every, self.stderr)
            self.samples.start(tokenizer, self.model, self.step, None)
        adopt(self)

    # --- public API ----------------------------------------------------------------------------

    def log(self, step: int | None = None, **scalars: float) -> None:
        """Log what the watch cannot see by itself (validation loss, anything): one metrics line at
        `step` (default: the optimizer steps done so far). `loss=` is the training loss when the model
        returns logits only; when it returns its own loss (the series), a logged one is kept beside it
        as `logged_loss`."""
        if not self.active:
            return
        try:
            record: dict[str, Any] = {"step": int(self.step if step is None else step)}
            for key, value in scalars.items():
                if isinstance(value, torch.Tensor):
                    value = value.detach().float().mean().item()
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue  # a string or an object: not a scalar for the log
                if key == "loss":  # the model's own loss is the series; the loop's is kept beside it
                    key = "logged_loss" if self._model_loss_seen else "train_loss"
                record[key] = float(value)
            if "train_loss" in record:
                self._logged_loss = True
            val = next((record[k] for k in ("val_loss", "val", "eval_loss") if k in record), None)
            if val is not None:
                self._val_loss = (record["step"], val)
            self._pending.append({"metrics_only": record})
            self.flush()
        except Exception as exc:
            self._fail(exc, "log()")

    def flush(self) -> None:
        """Write what is buffered (one host transfer)."""
        if not self.active or not self._pending:
            return
        if os.getpid() != self.pid:
            self._forget_in_child()
            return
        try:
            if self._weights:
                self._weights.settle()
            pending, self._pending = self._pending, []
            self._t_flushed = time.perf_counter()
            assert self.log_writer is not None
            self.log_writer.write(host_records(pending), self._logged_loss)
        except Exception as exc:
            self._fail(exc, "writing the run folder")

    def close(self) -> None:
        """Flush, write the closing record, remove every hook, release the run folder."""
        if self.closed:
            return
        if os.getpid() != self.pid:
            self._forget_in_child()
            return
        self.closed = True
        if self.active:
            self.flush()
            if self.samples is not None:
                self.samples.at_close(self.model, self.step, self._val_at(self.step))  # as training left it
            if self.active and self.log_writer is not None:
                try:
                    self.log_writer.close(self.step)
                except Exception as exc:
                    self._fail(exc, "closing")
        self._remove_hooks()
        if self.log_writer is not None:
            self.log_writer.release()

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- set-up --------------------------------------------------------------------------------

    def _install(self) -> None:
        m, opt = self.model, self.optimizer
        # one hook after the forward reads the call too (its inputs, modes and autocast are as they were before it)
        # the three hooks every step calls guard themselves (see `_guard`): one call less each, in the user's loop
        self._handles.append(m.register_forward_hook(self._on_forward, with_kwargs=True))
        self._handles.append(opt.register_step_post_hook(self._on_step_post))
        in_opt = {id(p) for g in opt.param_groups for p in g["params"]}
        candidates = [p for p in m.parameters() if p.requires_grad and id(p) in in_opt]
        if not candidates:
            candidates = [p for p in m.parameters() if p.requires_grad]
        # the first trainable parameter (the token embedding, usually): every backward through the model reaches it
        self._probe = candidates[0] if candidates else None
        self._device_type = candidates[0].device.type if candidates else "cpu"
        self._set_opt_params()
        if self._probe is not None:
            self._handles.append(self._probe.register_post_accumulate_grad_hook(self._after_accumulate))
        self._open_window(1)

    def _set_opt_params(self) -> None:
        """The optimizer's parameters, and the model's that are in none of its groups (read at full readings)."""
        self._opt_params = [p for g in self.optimizer.param_groups for p in g["params"]]
        in_opt = {id(p) for p in self._opt_params}
        self._outside = [p for p in self._model_params if id(p) not in in_opt]

    def _guard(self, fn: Callable[..., object]) -> Callable[..., None]:
        def hook(*args: object, **kwargs: object) -> None:
            if not self.active or (self.samples is not None and self.samples.drawing):
                return None
            try:
                fn(*args, **kwargs)
            except Exception as exc:
                self._fail(exc, fn.__name__)
            return None  # never change what the loop computes

        return hook

    # --- hooks ---------------------------------------------------------------------------------

    def _on_forward(self, module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
        """After every forward: its modes, tokens and loss (`model(idx, targets)` taken straight off its
        arguments); at full readings, `_read_forward` reads the rest. This runs cold after every forward
        of the user's loop, so it reads as little as it can."""
        if not self.active or (self.samples is not None and self.samples.drawing):
            return None
        try:
            window = self._window
            fwd = Forward(module.training, torch.is_grad_enabled(), None)
            window.forwards.append(fwd)
            if fwd.grad_enabled:
                window.grad_forward = fwd
            ids = args[0] if args and not kwargs and probes.is_ids(args[0]) else probes.forward_inputs(args, kwargs).ids
            if ids is not None:
                fwd.tokens = ids.numel()
                if self.world_size > 1 and not window.deep:  # under DDP every batch: ranks are compared
                    fwd.fingerprint = self._fingerprint(ids)
            logits, loss = probes.model_outputs(output)
            if loss is not None:
                fwd.loss = loss.detach()
                self._model_loss_seen = True
            if window.deep or self._count_on_logits:
                self._read_forward(window, fwd, args, kwargs, logits, loss)
        except Exception as exc:
            self._fail(exc, "_on_forward")
        return None  # never change what the loop computes

    def _read_forward(
        self,
        window: Window,
        fwd: Forward,
        args: tuple,
        kwargs: dict,
        logits: torch.Tensor | None,
        loss: torch.Tensor | None,
    ) -> None:
        """A forward of a full reading (or of a model whose backwards are counted at its logits):
        autocast, the batch's fingerprint, targets, graphs kept alive, the hook on the logits' gradient."""
        if torch.is_autocast_enabled(self._device_type):
            fwd.autocast = str(torch.get_autocast_dtype(self._device_type)).replace("torch.", "")
        if window.deep:  # batches and targets are read at full readings (every `interval` steps)
            read_batch(fwd, args, kwargs, self._fingerprint)
        anchor = loss if loss is not None and loss.requires_grad else logits
        if window.deep and anchor is not None and anchor.requires_grad and anchor.grad_fn is not None:
            self._graphs.mark(anchor.grad_fn, self.step + 1)  # graphs of full readings only
        if logits is not None and logits.requires_grad:
            if window.deep:
                fwd.rows = probes.sampled_rows(logits)

            def on_logits_grad(grad: torch.Tensor | None, fwd: Forward = fwd, window: Window = window) -> None:
                fwd.backwarded = True
                window.logit_backwards += 1
                if grad is None:  # torch.compile'd graphs can call output hooks without a gradient
                    fwd.rows = None
                    return
                if fwd.rows is not None and window is self._window:
                    window.weights.append(self._weights.take(grad, fwd.rows))
                    fwd.rows = None  # free it: one backward per forward is what loops do

            logits.register_hook(self._guard(on_logits_grad))

    def _before_accumulate(self, grad: torch.Tensor) -> None:
        """Before the probe's gradient is added (full readings): were the gradients cleared since the
        last backward?"""
        w, p = self._window, self._probe
        assert p is not None
        if p.grad is None:
            w.grad_before.append(0.0)
        else:
            w.grad_before.append(torch.linalg.vector_norm(p.grad.detach()).float())

    def _after_accumulate(self, p: torch.Tensor) -> None:
        """After each backward reached the probe (guards itself: see `_guard`)."""
        if not self.active or (self.samples is not None and self.samples.drawing):
            return None
        try:
            w = self._window
            w.backwards += 1
            fwd = w.grad_forward  # the forward this backward went through (models without logits hooks)
            if fwd is not None:
                fwd.backwarded = True
            if w.deep and not w.closure:
                assert p.grad is not None  # a post-accumulate hook runs once the gradient is there
                w.probe_after = torch.linalg.vector_norm(p.grad.detach()).float()
        except Exception as exc:
            self._fail(exc, "_after_accumulate")
        return None

    def _on_step_pre(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if not _has_closure(args, kwargs):  # with a closure the post hook reads the step
            self._at_step(self._window)

    def _at_step(self, w: Window) -> None:
        """Read the gradients as the update will see them (after clipping and unscaling): in full
        at full readings, and the snapshot for the update sizes every `grads_every` steps."""
        step = self.step + 1
        rec: dict[str, Any] = {}
        if w.deep:
            if sum(len(g["params"]) for g in self.optimizer.param_groups) != len(self._opt_params):
                self._set_opt_params()  # a group was added
            rec = gradients_at_step(self._opt_params, self._probe, self._outside, self.names, self.scaler)
        if step == 1 or step % self.grads_every == 0:
            self._snapshot = UpdateSnapshot(self.model)
        self._step_reading = rec

    def _on_step_post(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        """After every optimizer step (guards itself: see `_guard`)."""
        if not self.active or (self.samples is not None and self.samples.drawing):
            return None
        try:
            w = self._window
            if (len(args) > 1 or kwargs) and _has_closure(args, kwargs):
                w.closure = True  # Lightning, LBFGS: forward and backward ran inside step()
                self._at_step(w)
            self.step = step = self.step + 1
            now = time.perf_counter()
            seconds, self._t_last = now - self._t_last, now
            # the learning rates the update used, and whether gradients reached it (the step leaves both as they were)
            lrs = []
            for group in optimizer.param_groups:
                lr = group.get("lr")
                lrs.append(lr if type(lr) is float else as_float(lr))
            params = self._opt_params
            present = 1 if params and params[0].grad is not None else int(any(p.grad is not None for p in params))
            if w.deep or self._snapshot is not None:
                self._pending.append(self._full_record(w, step, seconds, lrs, present))
            else:  # the flush builds its record
                self._pending.append(LightStep(step, time.time(), seconds, w, lrs, present))
            self._open_window(step + 1)
            if w.deep and (now - self._t_flushed >= FLUSH_SECONDS or step <= DEEP_FIRST_STEPS):
                self.flush()
            if self.samples is not None and self.samples.due(step):
                self.samples.draw(self.model, step, self._val_at(step))
        except Exception as exc:
            self._fail(exc, "_on_step_post")
        return None

    def _val_at(self, step: int) -> float | None:
        """The validation loss `log()` gave for `step`, if it gave one."""
        return self._val_loss[1] if self._val_loss is not None and self._val_loss[0] == step else None

    def _full_record(self, w: Window, step: int, seconds: float, lrs: list, present: int) -> dict:
        """A full reading's record (or a step that carries the update sizes), tensors still on the device."""
        reading, self._step_reading = self._step_reading, {}
        record = window_record(w, step, time.time(), seconds, lrs, present, reading)
        if w.deep:
            self._count_on_logits = w.backwards == 0 and w.logit_backwards > 0
            record["memory"], record["memory_source"] = memory_in_use(self._probe)
            record["old_graphs_alive"] = self._graphs.old_alive(step)
        if self._snapshot is not None:
            record["grad_rows"], self._snapshot = self._snapshot.rows(self.model, self.optimizer), None
        return record

    def _open_window(self, step: int) -> None:
        """The window before optimizer step `step`, and the hooks it needs (see `schedule`)."""
        deep = self._schedule.is_deep(step)
        self._window = Window(deep)
        self._schedule.hold(step, deep, self._probe)

    # --- failure -------------------------------------------------------------------------------

    def _fail(self, exc: BaseException, where: str) -> None:
        if not self.active:
            return
        self.active = False
        self._remove_hooks()
        self._weights.drop()  # the copies kept for the write: it will not come
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
        message = f"minigpt.watch turned itself off after an error while {where}: {type(exc).__name__}: {exc}{at}"
        try:
            print(f"{message}; your training goes on unwatched", file=self.stderr)
        except Exception:  # a closed stderr: nothing more can be said
            pass
        if self.log_writer is not None:
            self.log_writer.error(message, self.step)
            try:
                self.log_writer.release()
            except Exception:  # noqa: BLE001  the watch is off; nothing may reach the user's loop
                pass

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._schedule.remove()

    def _forget_in_child(self) -> None:
        """In a forked child (a DataLoader worker, `os.fork()` in the loop): the run folder, its lock
        and the buffered steps are the parent's. The child writes nothing, and its exit flushes,
        closes and releases nothing; its hooks (on its own copy of the model) are removed."""
        self.active = False
        self.closed = True
        self._pending = []
        self._remove_hooks()
        if self.log_writer is not None:
            self.log_writer.forget()


def _has_closure(args: tuple, kwargs: dict) -> bool:
    """`optimizer.step(closure)`: args[0] is the optimizer itself; a closure comes next or by name."""
    return (args[1] if len(args) > 1 else kwargs.get("closure")) is not None
