"""Training loop: AdamW, warmup + cosine decay, clipping, eval, checkpoints, exact resume.

The library never knows a UI exists: progress goes out through callbacks
(`trainer.register_callback("on_step_end", fn)`, minGPT style).

One workspace, one writer: `run` holds the workspace lock (`minigpt.io.lock`) from before it
reads anything until it returns, and checks the data, vocabulary, config and memory
estimate before a fresh run moves the previous one aside.

Under `torchrun` (`minigpt.train.distributed`) every rank trains its own batches through
DistributedDataParallel and rank 0 alone takes the lock, archives, logs and saves.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

import torch

from minigpt.data.batches import get_batch
from minigpt.data.tokenizer import CharTokenizer
from minigpt.device import resolve_device, tf32_matmuls
from minigpt.errors import ConfigError, TrainingDiverged
from minigpt.io import lock
from minigpt.io.files import open_log
from minigpt.io.workspace import Workspace
from minigpt.logs.record import MetricsRecord, write_metrics
from minigpt.model.gradstats import grad_rows, row_params, tensor_norms
from minigpt.train import distributed
from minigpt.train.checkpoints import checkpoint_payload, save_evaluation
from minigpt.train.config import DTYPES, EVAL_TOKENS, TrainConfig, lr_at
from minigpt.train.eval_plan import EvalPlan, eval_steps_cost, plan_evals
from minigpt.train.resume import resumed_config, rng_state
from minigpt.train.run_files import RunFiles, interrupts_deferred
from minigpt.train.run_state import RunState, fresh_state, read_latest, resumed_state
from minigpt.train.time_budget import CALIBRATION_STEPS, TimePlan


class Trainer:
    EVENTS = ("on_start", "on_step_end", "on_eval", "on_checkpoint", "on_archive", "on_notice")

    def __init__(
        self,
        workspace: Workspace | str,
        cfg: TrainConfig,
        *,
        resume: bool = False,
        overrides: dict | None = None,
        allow_large: bool = False,
        time_budget_s: float | None = None,
        choose_eval_interval: bool = False,
    ):
        self.ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self.cfg = cfg
        # flags the user gave explicitly: on --resume they override the saved run's settings
        self.overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        self.resume = resume
        self.allow_large = allow_large  # skip the memory estimate check
        self.time_budget_s = time_budget_s  # --time: max_steps planned from measured throughput (time_budget)
        self.time_plan: TimePlan | None = None
        # no --eval-interval given: a short fresh run gets several evaluations (eval_plan)
        self.choose_eval_interval = choose_eval_interval
        self.eval_plan: EvalPlan | None = None  # a fresh run's schedule when planned here (--time; a chosen interval)
        self.callbacks: dict[str, list[Callable]] = defaultdict(list)
        self.stop_requested = False
        self.archived: Path | None = None  # where a fresh run moved the previous run's files
        self.state: RunState | None = None  # the run in progress (read it after an interrupt)
        self.world = distributed.current()  # a world of one unless torchrun started us and the group is up
        self.device = distributed.device_for(resolve_device(cfg.device), self.world)
        self._stop_agreed = False  # in a distributed run: some rank asked to stop (agreed at each step)
        self.files = RunFiles(self.ws, lambda notice: self._fire("on_notice", notice))

    def register_callback(self, event: str, fn: Callable) -> None:
        if event not in self.EVENTS:
            raise ValueError(f"unknown event {event!r}; expected one of {self.EVENTS}")
        self.callbacks[event].append(fn)

    def _fire(self, event: str, *args: object) -> None:
        for fn in self.callbacks[event]:
            fn(*args)

    def request_stop(self) -> None:
        """Stop after the current step (saving `latest`); safe to call from another thread."""
        self.stop_requested = True

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, splits: dict[str, torch.Tensor]) -> dict[str, float]:
        """Mean loss over `eval_batches * batch_size` windows per split, a few large forward passes
        instead of one per batch (the same windows at every evaluation)."""
        model.eval()
        out = {}
        rows = self.cfg.batch_size * self.cfg.eval_batches
        chunk = max(self.cfg.batch_size, EVAL_TOKENS // self.cfg.block_size)
        for name, data in splits.items():
            # a fixed generator: every evaluation sees the same windows, and the training RNG is untouched
            gen = torch.Generator().manual_seed(self.cfg.seed + 1)
            x, y = get_batch(data, rows, self.cfg.block_size, self.device, gen)
            total = torch.zeros((), device=self.device)
            for i in range(0, rows, chunk):
                with self._autocast():
                    loss = model(x[i : i + chunk], y[i : i + chunk])[1]
                total += loss.float() * x[i : i + chunk].shape[0]
            out[name] = (total / rows).item()  # a host sync per split
        model.train()
        return out

    def run(self) -> dict:
        """Train to `max_steps` (or a stop request) under the workspace lock; return a summary."""
        if not self.ws.root.is_dir():  # named as a missing tokenizer, never created by taking the lock
            CharTokenizer.from_file(self.ws.tokenizer)
        with self._workspace_lock() as notices, tf32_matmuls(self.device):
            for notice in notices:
                self._fire("on_notice", notice)
            if self.world.is_main:
                self.files.remove_orphan_temp_files()
            # read only under the lock (which finished any update a killed prepare left): a prepare
            # that committed before would otherwise leave a run on IDs its tokenizer does not describe
            tokenizer = CharTokenizer.from_file(self.ws.tokenizer)
            st = self._resume(tokenizer) if self.resume else self._start_fresh(tokenizer)
            self.state = st
            self._plan_evals()
            summary = {"steps": st.step, "best_val_loss": st.best_val, "val_loss": None, "stopped_early": False}
            if self.resume and st.step >= self.cfg.max_steps:
                return {**summary, "nothing_to_do": True, "seconds": 0.0}
            if self.resume and self.world.is_main:
                with interrupts_deferred():
                    self.files.truncate_logs(st.step)
            self._prepare_steps(st)
            self._fire(
                "on_start",
                {
                    "resumed": self.resume,
                    "step": st.step,
                    "max_steps": self.cfg.max_steps,
                    "device": str(self.device),
                    "world_size": self.world.size,
                    "eval_plan": self.eval_plan,
                },
            )
            st.run_start = time.perf_counter()
            if self.time_budget_s is not None:
                if self.world.distributed:
                    raise ConfigError("--time is not supported under torchrun yet (ranks must agree on a step count)")
                self.time_plan = TimePlan(self.time_budget_s, st.step)
            # only rank 0 writes the log; the other ranks' lines go nowhere
            # never through a link, never a FIFO
            log_ctx = open_log(self.ws.metrics) if self.world.is_main else open(os.devnull, "a", encoding="utf-8")
            with log_ctx as log:
                while st.step < self.cfg.max_steps and not self._stopping():
                    record = self._train_step(st, log)
                    if self.time_plan is not None:
                        self._plan_time(st)
                    if self._is_eval_step(st.step):
                        self._evaluate_and_save(st, record, log)
                    elif st.step % self.cfg.log_interval == 0:
                        write_metrics(log, record)
                    self._fire("on_step_end", record)
        summary.update(
            steps=st.step,
            best_val_loss=st.best_val,
            val_loss=st.val_loss,
            stopped_early=st.step < self.cfg.max_steps,
            seconds=time.perf_counter() - st.run_start,
        )
        return summary

    @contextlib.contextmanager
    def _workspace_lock(self) -> Iterator[list[str]]:
        """Rank 0 holds the workspace lock for the whole run; the other ranks write nothing and never take it."""
        if not self.world.is_main:
            yield []
            return
        with lock.acquire(self.ws.root, "train") as held:
            yield list(held.notices)

    def _stopping(self) -> bool:
        # every rank must stop at the same step: a distributed run uses the flag agreed in the last step
        return self._stop_agreed if self.world.distributed else self.stop_requested

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.cfg.dtype == "float32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=DTYPES[self.cfg.dtype])

    def _prepare_steps(self, st: RunState) -> None:
        """The module the steps call: compiled and/or wrapped in DDP. `st.model` stays the plain
        model, so checkpoints never carry `_orig_mod.` or `module.` prefixes."""
        step_model: torch.nn.Module = st.model
        if self.cfg.compile:
            step_model = torch.compile(step_model)  # type: ignore[assignment]
        if self.world.distributed:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            step_model = DistributedDataParallel(step_model, device_ids=ids)  # broadcasts rank 0's weights
        st.step_model = step_model
        st.named_params = list(st.model.named_parameters())
        st.row_params = row_params(st.named_params)

    def _plan_evals(self) -> None:
        """A fresh run of known length whose interval is ours to pick: several evaluations if the
        configured interval would give few (costs from the compute: nothing is timed yet)."""
        cfg = self.cfg
        if self.resume or self.time_budget_s is not None or not self.choose_eval_interval:
            return  # a resumed run keeps its evaluation windows; --time chooses once it has timed steps
        plan = plan_evals(
            cfg.max_steps,
            cfg.eval_interval,
            cfg.eval_batches,
            log_interval=cfg.log_interval,
            step_cost=1.0,
            eval_cost=eval_steps_cost(cfg.eval_batches, cfg.grad_accum),
            choose=True,
            cap=False,
            share_of="the run's compute",
        )
        if plan.chosen:
            cfg.eval_interval, cfg.eval_batches = plan.interval, plan.batches
            self.eval_plan = plan

    def _plan_time(self, st: RunState) -> None:
        """--time: after the calibration steps (one evaluation timed on the side), set max_steps so
        the run and its evaluations fit the budget; plan again at every evaluation (time_budget)."""
        plan, cfg = self.time_plan, self.cfg
        assert plan is not None
        elapsed = time.perf_counter() - st.run_start
        plan.measured_step(st.step, elapsed)
        first = plan.planned_steps is None
        if first and st.step - plan.start_step < CALIBRATION_STEPS and elapsed < 0.1 * plan.budget_s:
            return
        if first:
            t0 = time.perf_counter()
            self.evaluate(st.model, {"train": st.train_data, "val": st.val_data})  # timed, not logged
            plan.measured_eval(2 * (time.perf_counter() - t0))  # with a checkpoint save or two
            elapsed = time.perf_counter() - st.run_start
            if not self.resume:  # a resumed run keeps its evaluation windows
                self.eval_plan = plan.choose_evals(
                    st.step,
                    elapsed,
                    eval_interval=cfg.eval_interval,
                    eval_batches=cfg.eval_batches,
                    log_interval=cfg.log_interval,
                    choose=self.choose_eval_interval,
                )
                cfg.eval_interval, cfg.eval_batches = self.eval_plan.interval, self.eval_plan.batches
        if first or self._is_eval_step(st.step):
            cfg.max_steps = plan.plan(st.step, elapsed, cfg.eval_interval, cfg.warmup_steps)
            cfg.warmup_steps = plan.warmup_steps or cfg.warmup_steps
            if first:
                self._fire("on_notice", plan.describe())
        if elapsed >= plan.budget_s and st.step < cfg.max_steps:
            # out of time (the machine got slower than the last plan assumed): this step's evaluation
            # and save are the last, and the decay stops short of its floor: said, not hidden
            planned, lr = cfg.max_steps, lr_at(st.step, cfg)
            cfg.max_steps, plan.cut_at = st.step, st.step
            self._fire(
                "on_notice",
                f"--time ran out at step {st.step:,} of the {planned:,} planned (the machine slowed down): the "
                f"run ends here at lr {lr:.2e}, short of the decay's floor {cfg.learning_rate * cfg.min_lr_ratio:.2e}",
            )

    def _is_eval_step(self, step: int) -> bool:
        return step % self.cfg.eval_interval == 0 or step == self.cfg.max_steps or self._stopping()

    # --- starting: fresh or resumed, everything checked before anything moves ---

    def _start_fresh(self, tokenizer: CharTokenizer) -> RunState:
        st = fresh_state(self.ws, self.cfg, tokenizer, self.world, self.device, allow_large=self.allow_large)
        if self.world.is_main:
            with interrupts_deferred():  # a half-moved run would be split between two folders
                self.archived = self.files.archive_previous_run()  # only now: fresh_state checked every input
            if self.archived is not None:
                self._fire("on_archive", str(self.archived))
            self.files.start_fresh_logs()
            self.files.write_sample(st.model, st.tokenizer, 0, None)  # step 0: what the untrained model writes
        return st

    def _resume(self, tokenizer: CharTokenizer) -> RunState:
        raw = read_latest(self.ws)
        path = self.ws.latest_checkpoint
        self.cfg, notice = resumed_config(self.cfg, raw, self.overrides, path)
        if notice:  # say it: a resumed run that silently kept (or dropped) a setting misleads its curve
            self._fire("on_notice", notice)
        return resumed_state(
            raw,
            path,
            self.ws,
            self.cfg,
            tokenizer,
            self.world,
            self.device,
            allow_large=self.allow_large,
            notify=lambda notice: self._fire("on_notice", notice),
        )

    # --- one optimizer step ---

    def _train_step(self, st: RunState, log: IO[str]) -> MetricsRecord:
        """Forward/backward over `grad_accum` micro-batches, clip, update; the step's log record.
        Raises TrainingDiverged (after logging the step) on a non-finite loss or gradient norm."""
        model = st.step_model if st.step_model is not None else st.model
        cfg, world = self.cfg, self.world
        t0 = time.perf_counter()
        lr = lr_at(st.step, cfg)
        for group in st.optimizer.param_groups:
            group["lr"] = lr
        losses = []
        for i in range(cfg.grad_accum):
            x, y = get_batch(st.train_data, cfg.batch_size, cfg.block_size, self.device, st.batch_gen)
            # DDP averages the gradients across ranks on the last micro-batch only
            defer = world.distributed and i < cfg.grad_accum - 1
            with model.no_sync() if defer else contextlib.nullcontext():  # type: ignore[operator]
                with self._autocast():
                    _, loss = model(x, y)
                scaled = loss / cfg.grad_accum
                (st.scaler.scale(scaled) if st.scaler is not None else scaled).backward()
            losses.append(loss.detach())
        if st.scaler is not None:
            st.scaler.unscale_(st.optimizer)  # clip and log the true gradients
        step = st.step + 1
        log_grads = (
            world.is_main
            and (step % cfg.eval_interval == 0 or step == cfg.max_steps)
            and self.ws.metrics.parent.is_dir()
        )
        named, host = self._clip_and_sync(st, losses, log_grads)
        train_loss, norm = host[0], host[1]
        if world.distributed:
            self._stop_agreed = host[2] > 0
        st.step = step
        skipped = False
        if not (math.isfinite(train_loss) and math.isfinite(norm)):
            if st.scaler is not None and math.isfinite(train_loss):
                skipped = True  # a float16 overflow: the scaler skips this update and lowers its scale
            else:
                record: MetricsRecord = {
                    "step": step,
                    "train_loss": train_loss,
                    "lr": lr,
                    "grad_norm": norm,
                    "nonfinite": True,
                    "time": time.time(),
                }
                write_metrics(log, record)
                where = f"last good checkpoint: {st.last_good}" if st.last_good else "no checkpoint was written yet"
                raise TrainingDiverged(
                    f"training diverged at step {step}: loss={train_loss}, gradient norm={norm} "
                    f"(learning rate {lr:.3g}); nothing was saved from this step; {where}",
                    step=step,
                    last_good=st.last_good,
                )
        if log_grads:
            offset = 3 if world.distributed else 2
            grad_norms: Sequence[float | None] = host[offset : offset + len(named)]
            if len(named) < len(st.named_params):  # None for the parameters that got no gradient
                by_param = {id(p): g for (_, p), g in zip(named, grad_norms, strict=True)}
                grad_norms = [by_param.get(id(p)) for _, p in st.named_params]
            rows = grad_rows(st.row_params, grad_norms, host[offset + len(named) :])
            self.files.log_grads(step, norm, cfg.grad_clip, rows)  # the gradients pane follows this file
        if st.scaler is not None:
            st.scaler.step(st.optimizer)
            st.scaler.update()
        else:
            st.optimizer.step()
        st.optimizer.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        record = {
            "step": step,
            "train_loss": train_loss,
            "lr": lr,
            "grad_norm": norm,
            "tokens_per_s": cfg.batch_size * cfg.block_size * cfg.grad_accum * world.size / dt,  # all ranks
            "elapsed_s": time.perf_counter() - st.run_start,
            "time": time.time(),
            "world_size": world.size,
        }
        if skipped:
            record["skipped"] = True
        return record

    @torch.no_grad()
    def _clip_and_sync(self, st: RunState, losses: list[torch.Tensor], log_grads: bool) -> tuple[list, list[float]]:
        """Clip by the global norm; return the parameters that have gradients and, from one host
        transfer, [loss, norm before clipping, (stop flag when distributed), (per-parameter gradient
        norms and all weight norms when `log_grads`)]."""
        cfg, world = self.cfg, self.world
        named = [(name, p) for name, p in st.named_params if p.grad is not None]
        # per-parameter norms once: the clip needs them anyway, and the gradients log reuses them
        grads = [p.grad for _, p in named if p.grad is not None]
        grad_norms = torch.stack(tensor_norms(grads)) if grads else torch.zeros(0, device=self.device)
        grad_norm = torch.linalg.vector_norm(grad_norms)  # as clip_grad_norm_ computes it
        if cfg.grad_clip > 0 and named:
            torch.nn.utils.clip_grads_with_norm_([p for _, p in named], cfg.grad_clip, grad_norm)
        loss = losses[0] if len(losses) == 1 else torch.stack(losses).mean()
        parts = [loss.float(), grad_norm.float()]
        if world.distributed:
            # one all-reduce: the loss over all ranks, and whether any rank was asked to stop
            stop = torch.tensor(float(self.stop_requested), device=self.device)
            shared = distributed.all_sum(torch.stack([parts[0], stop]), world)
            parts = [shared[0] / world.size, parts[1], shared[1]]
        host = torch.stack(parts)
        if log_grads:
            weight_norms = torch.stack(tensor_norms([p for _, p in st.named_params]))
            host = torch.cat([host, grad_norms.float(), weight_norms.float()])
        return named, host.tolist()  # one host sync per step for every number (a CPU-GPU sync point)

    # --- evaluation, the log line and the checkpoints, which land together ---

    def _evaluate_and_save(self, st: RunState, record: MetricsRecord, log: IO[str]) -> None:
        step, ws = st.step, self.ws
        if not _weights_finite(st.model):
            write_metrics(log, {**record, "nonfinite": True})
            raise TrainingDiverged(
                f"weights became non-finite after the update at step {step} (learning rate {record['lr']:.3g}); "
                f"not saved; last good checkpoint: {st.last_good or 'none yet'}",
                step=step,
                last_good=st.last_good,
            )
        # every rank's generator states reach rank 0's checkpoint (exact resume at the same world size)
        rng_states = distributed.gather(rng_state(st.batch_gen), self.world)
        if not self.world.is_main:
            return  # rank 0 evaluates and saves; the others wait for it at the next step's all-reduce
        # the plain model: a compiled one would recompile for the larger evaluation batch
        t_eval = time.perf_counter()
        losses = self.evaluate(st.model, {"train": st.train_data, "val": st.val_data})
        record["val_loss"] = losses["val"]
        record["eval_train_loss"] = losses["train"]
        improved = losses["val"] < st.best_val
        st.best_val = min(st.best_val, losses["val"])
        payload = checkpoint_payload(st, self.cfg, self.world, rng_states)
        # a Ctrl-C held back during the save lands after the state names the checkpoint just written
        with interrupts_deferred():
            save_evaluation(log, record, ws, payload, improved=improved)  # the line, best, latest: in that order
            st.last_good, st.last_good_step, st.val_loss = str(ws.latest_checkpoint), step, losses["val"]
        self.files.write_sample(st.model, st.tokenizer, step, losses["val"])
        if self.time_plan is not None:
            self.time_plan.measured_eval(time.perf_counter() - t_eval)
        self._fire("on_checkpoint", str(ws.latest_checkpoint))
        if improved:
            self._fire("on_checkpoint", str(ws.best_checkpoint))
        self._fire("on_eval", record)


def _weights_finite(model: torch.nn.Module) -> bool:
    return bool(torch.isfinite(torch.stack(tensor_norms([p.detach() for p in model.parameters()]))).all())
