"""What the watch saw of one optimizer step, and how it becomes the step's record: the forwards
between two steps (`Forward`, `Window`), a step that is not a full reading as its hooks left it
(`LightStep`), the fields every step's record holds (`step_record`), and the buffered records moved
to the host in one transfer (`host_records`). `runlog.loop_record` turns a record into its line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from minigpt.loopwatch import probes


class Sentinel:
    """Hung on a step's graph (`grad_fn.metadata`): alive exactly as long as that graph is."""


@dataclass(slots=True)
class Forward:
    training: bool
    grad_enabled: bool
    autocast: str | None
    tokens: int = 0
    fingerprint: torch.Tensor | None = None
    relation: torch.Tensor | None = None  # [share equal, share shifted]
    target_name: str | None = None
    loss: torch.Tensor | None = None  # the model's own loss
    rows: torch.Tensor | None = None  # sampled logits rows (deep windows)
    backwarded: bool = False


class Window:
    """What happened between two optimizer steps (a plain class: one is made per step, in a hook)."""

    __slots__ = (
        "deep",
        "forwards",
        "backwards",
        "logit_backwards",
        "grad_forward",
        "grad_before",
        "weights",
        "probe_after",
        "closure",
    )

    def __init__(self, deep: bool):
        self.deep = deep
        self.forwards: list[Forward] = []
        self.backwards = 0  # counted on probe 0's gradient
        self.logit_backwards = 0  # counted on the logits' gradient
        self.grad_forward: Forward | None = None  # the last forward with gradients enabled
        self.grad_before: list[Any] = []  # per backward: 0.0, None (not read) or a tensor
        self.weights: list[torch.Tensor] = []  # per backward through the logits
        self.probe_after: torch.Tensor | None = None  # probe gradient norm after the last backward
        self.closure = False  # forward/backward run inside optimizer.step(closure)


@dataclass(slots=True)
class LightStep:
    """A step that is not a full reading, as its hooks saw it: the flush makes its record."""

    step: int
    time: float
    seconds: float
    window: Window
    lrs: list[float | None]
    grads_present: int  # 1 when some parameter of the optimizer has a gradient at the step


def step_record(w: Window, step: int, at: float, seconds: float, lrs: list, present: int) -> dict[str, Any]:
    """What every step's record holds: counts of its forwards and backwards, modes, tokens, learning rates."""
    train = [f for f in w.forwards if f.backwarded]
    evals = [f for f in w.forwards if not f.backwarded]
    return {
        "step": step,
        "deep": w.deep,
        "closure": w.closure,
        "backwards": w.backwards or w.logit_backwards,
        "seconds": seconds,
        "time": at,
        "lrs": lrs,
        "grads_present": present,
        "train_forwards": len(train),
        "train_in_eval_mode": sum(not f.training for f in train),
        "eval_forwards": len(evals),
        "eval_in_train_mode": sum(f.training for f in evals),
        "eval_with_grad": sum(f.grad_enabled for f in evals),
        "autocast": next((f.autocast for f in train if f.autocast), None),
        "tokens": sum(f.tokens for f in train),
    }


def host_records(pending: list[dict | LightStep]) -> list[dict]:
    """The buffered records with every tensor moved to the host in one transfer per dtype; the light
    steps' records are built here, where the loop over them runs warm."""
    losses = [
        [f.loss for f in s.window.forwards if f.backwarded and f.loss is not None]
        for s in pending
        if isinstance(s, LightStep)
    ]
    full = [s for s in pending if not isinstance(s, LightStep)]
    host = probes.to_host([{"losses": losses}, *full])
    host_losses, host_full = iter(host[0]["losses"]), iter(host[1:])
    out = []
    for s in pending:
        if isinstance(s, LightStep):
            record = step_record(s.window, s.step, s.time, s.seconds, s.lrs, s.grads_present)
            record["loss"] = next(host_losses) or None
            record["light"] = True  # `runlog.loop_record` writes its short line
            out.append(record)
        else:
            out.append(next(host_full))
    return out
