"""What the watch saw of one optimizer step, and how it becomes the step's record: the forwards
between two steps (`Forward`, `Window`), a step that is not a full reading as its hooks left it
(`LightStep`), the weights before a `grads_every` step (`UpdateSnapshot`), the fields every step's
record holds (`step_record`), a light step's short line (`short_line`), and the buffered records
moved to the host in one transfer (`host_records`). `runlog.loop_record` turns a record into its line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from minigpt.loopwatch import probes
from minigpt.model.gradstats import tensor_norms


class Sentinel:
    """Hung on a step's graph (`grad_fn.metadata`): alive exactly as long as that graph is."""


@dataclass(slots=True)
class Forward:
    training: bool
    grad_enabled: bool
    autocast: str | None
    tokens: int = 0
    fingerprint: torch.Tensor | None = None
    relation: tuple[torch.Tensor, list[int]] | None = None  # probes.target_relation: counts, out of
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
        self.weights: list[list] = []  # per backward through the logits: [sums, n_rows, n_total] (Watch._loss_weight)
        self.probe_after: torch.Tensor | None = None  # probe gradient norm after the last backward
        self.closure = False  # forward/backward run inside optimizer.step(closure)


class UpdateSnapshot:
    """Before a `grads_every` step's update: every parameter's copy and gradient norm (-1: none); after
    it, `rows` gives grads.jsonl's columns, with the update sizes (tensors left on the device)."""

    def __init__(self, model: nn.Module):
        params = list(model.parameters())
        self.before = [p.detach().clone() for p in params]
        with_grad = [i for i, p in enumerate(params) if p.grad is not None]
        norms = tensor_norms([params[i].grad.detach() for i in with_grad])  # type: ignore[union-attr]
        self.grad_norms: torch.Tensor | None
        if len(with_grad) == len(params):  # the usual case: one stack of the batched norms
            self.grad_norms = torch.stack(norms).float() if norms else None
        else:
            by_index = dict(zip(with_grad, norms, strict=True))
            none = [torch.tensor(-1.0, device=p.device) for p in params]
            self.grad_norms = torch.stack([by_index.get(i, none[i]).float() for i in range(len(params))])

    def rows(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
        named = list(model.named_parameters())
        weights = torch.stack(tensor_norms([p.detach() for _, p in named])).float()
        updates = torch.stack(tensor_norms([p.detach() - old for (_, p), old in zip(named, self.before)])).float()
        in_opt = {id(p) for g in optimizer.param_groups for p in g["params"]}
        return {  # tuples: the flush's search for tensors (`probes.to_host`) does not look into them
            "names": tuple(n for n, _ in named),
            "shapes": tuple(tuple(p.shape) for _, p in named),
            "requires_grad": tuple(p.requires_grad for _, p in named),
            "in_optimizer": tuple(id(p) in in_opt for _, p in named),
            "grad_norms": self.grad_norms,
            "weight_norms": weights,
            "update_norms": updates,
        }


@dataclass(slots=True)
class LightStep:
    """A step that is not a full reading, as its hooks saw it: the flush makes its record."""

    step: int
    time: float
    seconds: float
    window: Window
    lrs: list[float | None]
    grads_present: int  # 1 when some parameter of the optimizer has a gradient at the step


def forward_counts(w: Window) -> dict[str, Any]:
    """The window's forwards counted in one pass: training ones (a backward went through them) and
    evaluation ones, their modes, tokens and autocast."""
    train = tokens = train_eval = evals = eval_train = eval_grad = 0
    autocast = None
    for f in w.forwards:
        if f.backwarded:
            train += 1
            tokens += f.tokens
            train_eval += not f.training
            autocast = autocast or f.autocast
        else:
            evals += 1
            eval_train += f.training
            eval_grad += f.grad_enabled
    return {
        "train_forwards": train,
        "train_in_eval_mode": train_eval,
        "eval_forwards": evals,
        "eval_in_train_mode": eval_train,
        "eval_with_grad": eval_grad,
        "autocast": autocast,
        "tokens": tokens,
    }


def step_record(w: Window, step: int, at: float, seconds: float, lrs: list, present: int) -> dict[str, Any]:
    """What every step's record holds: counts of its forwards and backwards, modes, tokens, learning rates."""
    return {
        "step": step,
        "deep": w.deep,
        "closure": w.closure,
        "backwards": w.backwards or w.logit_backwards,
        "seconds": seconds,
        "time": at,
        "lrs": lrs,
        "grads_present": present,
        **forward_counts(w),
    }


def short_line(s: LightStep, losses: list[float] | None, prints: tuple[list, list] = ([], [])) -> dict[str, Any]:
    """The loop log's line of a step between full readings, made straight from what its hooks noted:
    the fields `step_record` and `runlog.loop_record` would give it, less those at their value in
    `loop_log.STEP_DEFAULTS` (the reader puts them back). The flush makes one per step, inside the
    user's loop, so it builds one dict, not three. `prints`: the batches' fingerprints of its
    training and evaluation forwards (taken under DDP only)."""
    w = s.window
    backwards = w.backwards or w.logit_backwards
    fs = w.forwards
    if len(fs) == 1 and fs[0].backwarded and fs[0].training:  # the usual step: one forward, trained
        out: dict[str, Any] = {
            "kind": "step",
            "step": s.step,
            "backwards": backwards,
            "micro_batches": backwards,
            "train_forwards": 1,
            "lrs": s.lrs,
            "tokens": fs[0].tokens,
            "seconds": s.seconds,
            "grads_at_step": "present" if s.grads_present else "none",
        }
        if fs[0].autocast:
            out["autocast"] = fs[0].autocast
        if w.closure:
            out["closure"] = True
        if losses:
            out["loss"] = sum(losses) / len(losses)
        if prints[0]:
            out["fingerprints"] = prints[0]
        return out
    counts = forward_counts(w)
    out = {
        "kind": "step",
        "step": s.step,
        "backwards": backwards,
        "micro_batches": backwards,  # no clear is seen between full readings
        "train_forwards": counts["train_forwards"],
        "lrs": s.lrs,
        "tokens": counts["tokens"],
        "seconds": s.seconds,
        "grads_at_step": "present" if s.grads_present else "none",
    }
    for key in ("train_in_eval_mode", "eval_forwards", "eval_in_train_mode", "eval_with_grad", "autocast"):
        if counts[key]:
            out[key] = counts[key]
    if w.closure:
        out["closure"] = True
    if losses:  # one per micro-batch, averaged here on the host
        out["loss"] = sum(losses) / len(losses)
    if prints[0]:
        out["fingerprints"] = prints[0]
    if prints[1]:
        out["eval_fingerprints"] = prints[1]
    return out


def host_records(pending: list[dict | LightStep]) -> list[dict]:
    """The buffered records with every tensor moved to the host in one transfer per dtype; a light
    step's record is its `short_line` (with the time its metrics line needs), built here."""
    losses = [
        [f.loss for f in s.window.forwards if f.backwarded and f.loss is not None]
        for s in pending
        if isinstance(s, LightStep)
    ]
    # fingerprints of the light steps' batches (taken under DDP only): (training ones, evaluation ones)
    prints = [
        (
            [f.fingerprint for f in s.window.forwards if f.fingerprint is not None and f.backwarded],
            [f.fingerprint for f in s.window.forwards if f.fingerprint is not None and not f.backwarded],
        )
        for s in pending
        if isinstance(s, LightStep)
    ]
    full = [s for s in pending if not isinstance(s, LightStep)]
    # the light steps' numbers as flat lists: one step's are the next len(...) numbers
    flat = {"losses": [t for step in losses for t in step], "prints": [t for tr, ev in prints for t in tr + ev]}
    host = probes.to_host([flat, *full])
    host_losses, host_prints, host_full = iter(host[0]["losses"]), iter(host[0]["prints"]), iter(host[1:])
    step_losses, step_prints = iter(losses), iter(prints)
    out = []
    for s in pending:
        if isinstance(s, LightStep):
            mine = [next(host_losses) for _ in next(step_losses)]
            tr, ev = next(step_prints)
            train, evals = [int(next(host_prints)) for _ in tr], [int(next(host_prints)) for _ in ev]
            line = short_line(s, mine, (train, evals))
            out.append(
                {"step": s.step, "time": s.time, "seconds": s.seconds, "short_line": line, "fingerprints": train}
            )
        else:
            out.append(next(host_full))
    return out
