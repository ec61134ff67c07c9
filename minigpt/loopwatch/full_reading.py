"""What a full reading reads beyond the step's counts: each forward's batch and targets, the autograd graphs kept
alive, the gradients as the update sees them (after clipping and unscaling), and the record of its window's forwards
(fingerprints, targets, losses) and backwards (whether the gradients were cleared, the loss weight). Tensors stay on
the device until the flush (`steps.host_records`)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch

from minigpt.loopwatch import probes
from minigpt.loopwatch.steps import Forward, Sentinel, Window, step_record
from minigpt.model.gradstats import total_norm


def read_batch(fwd: Forward, args: tuple, kwargs: dict, fingerprint: Callable[[torch.Tensor], Any]) -> None:
    """The batch's fingerprint and how its targets relate to its inputs, from a forward's arguments."""
    inputs = probes.forward_inputs(args, kwargs)
    if inputs.ids is not None:
        fwd.fingerprint = fingerprint(inputs.ids)
        if inputs.targets is not None:
            fwd.relation = probes.target_relation(inputs.ids, inputs.targets)
            fwd.target_name = inputs.target_name


class KeptGraphs:
    """The autograd graphs of full readings, marked so that those still referenced can be counted: a loop that keeps
    graphs alive keeps these too."""

    def __init__(self) -> None:
        self._marks: list[tuple[int, weakref.ref]] = []  # (step, the sentinel in the graph)

    def mark(self, grad_fn: torch.autograd.graph.Node, step: int) -> None:
        """Mark the graph ending in `grad_fn` (a loss's or logits' of step `step`'s window)."""
        sentinel = Sentinel()
        grad_fn.metadata["minigpt.watch"] = sentinel  # type: ignore[index]  # a dict (Node.metadata)
        self._marks.append((step, weakref.ref(sentinel)))

    def old_alive(self, step: int) -> int:
        """How many graphs of full readings two steps or more before `step` are still alive."""
        self._marks = [(s, r) for s, r in self._marks if r() is not None]
        return sum(1 for s, _ in self._marks if s <= step - 2)


def gradients_at_step(
    opt_params: list[torch.Tensor],
    probe: torch.Tensor | None,
    outside: list[torch.Tensor],
    names: dict,
    scaler: object | None,
) -> dict[str, Any]:
    """The gradients' norm as the step sees them, the probe's, the parameters with gradients outside every group of
    the optimizer, and the loss scale."""
    rec: dict[str, Any] = {}
    grads = [p.grad for p in opt_params if p.grad is not None]
    rec["grad_norm_at_step"] = total_norm(grads).float() if grads else 0.0
    rec["probe_at_step"] = (
        torch.linalg.vector_norm(probe.grad.detach()).float() if probe is not None and probe.grad is not None else 0.0
    )
    rec["outside_optimizer"] = [names.get(id(p), "?") for p in outside if p.grad is not None][:20]
    if scaler is not None and hasattr(scaler, "get_scale"):
        rec["loss_scale"] = float(scaler.get_scale())
    return rec


def window_record(w: Window, step: int, at: float, seconds: float, lrs: list, present: int, reading: dict) -> dict:
    """A full reading's record of the window before step `step`, with what the step read (`reading`)."""
    record: dict[str, Any] = {
        **step_record(w, step, at, seconds, lrs, present),
        "grad_before": w.grad_before,
        "weights": w.weights,
        "probe_after": w.probe_after,
        **reading,
    }
    train = [f for f in w.forwards if f.backwarded]
    record["fingerprints"] = [f.fingerprint for f in train if f.fingerprint is not None]
    evals = [f for f in w.forwards if not f.backwarded]
    record["eval_fingerprints"] = [f.fingerprint for f in evals if f.fingerprint is not None]
    rel = [f.relation for f in train if f.relation is not None]
    record["targets"] = next(f.target_name for f in train if f.relation is not None) if rel else None
    # micro-batches' counts, pooled on the host (runlog.loop_record)
    record["relation"] = [[c for c, _ in rel], [n for _, n in rel]] if rel else None
    losses = [f.loss for f in train if f.loss is not None]
    record["loss"] = losses or None  # micro-batches' losses are averaged on the host
    return record
