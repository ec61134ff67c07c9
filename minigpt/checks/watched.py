"""What every loop check reads: the watched loop of the workspace (`logs/loop.jsonl`, written by
`minigpt.watch`), read once per change of the file, and the values each check's result carries."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minigpt.checks.result import Outcome, Status
from minigpt.io.workspace import Workspace
from minigpt.logs.curve_advice import RunSettings
from minigpt.loopwatch.loop_log import LoopLog, read_loop_log

if TYPE_CHECKING:
    from minigpt.checks.context import CheckContext

WATCH_HINT = "add `watch = minigpt.watch(model, optimizer, workspace=RUN)` to your training loop"
MIN_STEPS = 3  # steps a check needs before it says anything

_cache: dict[tuple, LoopLog | None] = {}


def read_watched(ws: Workspace) -> LoopLog | None:
    """The watched loop of a workspace, read once per change of the file; None when there is none."""
    path = ws.loop_log
    key: tuple
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        key = (str(path), None)
    if key not in _cache:
        _cache.clear()  # one run at a time: the newest reading only
        _cache[key] = read_loop_log(ws)
    return _cache[key]


def watched_loop(ctx: CheckContext, need_steps: int = MIN_STEPS, *, forwards: bool = False) -> LoopLog:
    """The watched loop of the checks' workspace (`read_watched`: the loop checks all read it); skips
    the calling check when there is none or it has fewer than `need_steps` steps, and, for a check
    that judges forwards (`forwards`), when the watched module never ran one."""
    ws = ctx.ws
    log = read_watched(ws)
    if log is None:
        raise Outcome(Status.SKIP, f"no watched loop in {ws.root} (logs/loop.jsonl): {WATCH_HINT}")
    if len(log.steps) < need_steps:
        why = f" ({log.errors[0].get('message', '')})" if log.errors else ""
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: {len(log.steps)} optimizer step(s) recorded, this check needs {need_steps}{why}",
        )
    if forwards and log.steps and not any(s.get("train_forwards") or s.get("eval_forwards") for s in log.steps):
        raise Outcome(Status.SKIP, f"{log.writer()}: {NO_FORWARD.format(steps=len(log.steps))}")
    return log


# the hooks are on the watched module; a loop that calls another one (a wrapper's submodule) is unseen
NO_FORWARD = (
    "the watched module never ran forward in {steps} optimizer steps: the loop calls another module "
    "(Lightning: training_step calls self.model(...)); watch that one: minigpt.watch(model.model, ...), "
    "lightning_callback(RUN, module='model')"
)


def loop_values(log: LoopLog, **more: object) -> dict:
    return {"writer": log.writer(), "steps": len(log.steps), "last_step": log.last_step, **more}


def first_step(steps: list[dict]) -> int | None:
    return steps[0]["step"] if steps else None


def mode_sensitive(log: LoopLog) -> tuple[int, list[str]]:
    return int(log.header.get("mode_sensitive_count", 0)), list(log.header.get("mode_sensitive_modules", []))


@dataclass(frozen=True)
class MeasuredClipping:
    """Clipping as the watch measured it at its full readings (the optimizer step's gradient norm
    against the backward's)."""

    readings: int  # full readings where the clip could be read
    clipped: int  # of them, readings where the step's gradient was cut
    max_norm: float | None  # the median norm the clipped steps were cut to: the threshold in use

    @property
    def words(self) -> str:
        return f"the watch saw clipping at {self.clipped} of {self.readings} full readings"


CLIP_AFTER_STEP = 3  # the first steps' gradients are the initial ones: clipping is judged after them


def measured_warmup(log: LoopLog) -> int | None:
    """Steps the watched loop's learning rate (its first group's) rose before reaching its peak: 0 when it
    started at half its peak or more; None without learning rates."""
    lrs = [(s["step"], s["lrs"][0]) for s in log.steps if s.get("lrs") and isinstance(s["lrs"][0], int | float)]
    if not lrs:
        return None
    peak = max(lr for _, lr in lrs)
    if peak <= 0 or lrs[0][1] >= 0.5 * peak:
        return 0
    return next(step for step, lr in lrs if lr >= 0.99 * peak) - lrs[0][0]  # the steps before the peak


def clip_readings(log: LoopLog, after_step: int = CLIP_AFTER_STEP) -> list[dict]:
    """The full readings where the watch could read whether the step was clipped (after the first steps)."""
    return [s for s in log.deep if "clipped" in s and s["step"] > after_step]


def measured_clipping(log: LoopLog) -> MeasuredClipping | None:
    """What the watched loop measured of clipping; None without a reading."""
    read = clip_readings(log)
    if not read:
        return None
    cut = [s["grad_norm_at_step"] for s in read if s["clipped"] and s.get("grad_norm_at_step") is not None]
    return MeasuredClipping(len(read), sum(bool(s["clipped"]) for s in read), statistics.median(cut) if cut else None)


def watch_settings(ws: Workspace, settings: RunSettings | None = None) -> RunSettings | None:
    """The run's settings for a curve's advice (`settings`: the checkpoint's, if any) with what the
    watched loop measured: its warmup, and its clipping when the settings name none (a loop's settings
    are not saved; the watch sees them). The check's verdict and the Loss pane's use the same."""
    log = read_watched(ws)
    if log is None or not log.steps:
        return settings
    warmup = measured_warmup(log)
    if warmup is not None:
        settings = dataclasses.replace(settings or RunSettings("the watched loop"), warmup_steps=warmup)
    if settings is not None and settings.grad_clip:
        return settings
    clip = measured_clipping(log)
    if clip is None or not clip.clipped or clip.max_norm is None:
        return settings
    if settings is None:
        return RunSettings(clip.words, grad_clip=clip.max_norm)
    return dataclasses.replace(settings, grad_clip=clip.max_norm, clip_source=clip.words)
