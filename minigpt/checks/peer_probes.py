"""What a parameter far below its peers means, measured on the model (`peers.py` has the ratios):
`gradients` probes one whose gradient is orders of magnitude below its kind's by replacing it and
reading the loss; `optimizer_update` names what makes an update/weight ratio that low (the weights'
scale against its peers', the gradient against AdamW's eps). Each raises the check's `Outcome`."""

from __future__ import annotations

import math

import torch

from minigpt.checks import adapter
from minigpt.checks.peers import (
    GRAD_PEER_FLOOR,
    UPDATE_PEER_FLOOR,
    far_below,
    grad_peer_ratios,
    kind,
    update_peer_ratios,
)
from minigpt.checks.result import Outcome, Status, name_list
from minigpt.checks.values import GradientsValues, OptimizerValues, UpdateRow

ADAMW_EPS = 1e-8  # optimizer_update's AdamW, as torch's default
PROBED_MAX = 16  # parameters far below their peers whose hold on the loss is measured (two forwards each)
# a replacement that changes the eval loss by less than this (relative) means the loss ignores the parameter
IGNORED_REL = 1e-4


def far_below_peers(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, rows: list, values: GradientsValues
) -> None:
    """A gradient orders of magnitude below its peers' (`peers.py`) is not a healthy small one. What
    it means is measured, not guessed: each such parameter is replaced by zeros and by random
    values, and the change of the loss read. A loss that moves although the gradient is
    nearly zero means the parameter sits on a flat stretch (a saturated gate or activation): a
    failure (of the parameter, or of a norm after it that cancels its scale: the two look alike from
    here, and the cause says both). A loss that does not move means it is ignored: a bias the softmax cancels (a key
    projection's) is harmless and noted; a whole weight matrix ignored means a cut or closed branch."""
    ratios = grad_peer_ratios(rows)
    if ratios:
        values["lowest_to_peers"] = min(ratios.items(), key=lambda nr: nr[1])
    low = far_below(ratios, GRAD_PEER_FLOOR)
    if not low:
        return
    moved = loss_change_when_replaced(model, x, y, [n for n, _ in low[:PROBED_MAX]])
    shapes = {r["name"]: r["shape"] for r in rows}
    flat = [(n, r, moved[n]) for n, r in low if n in moved and moved[n] > IGNORED_REL]
    ignored = [(n, r) for n, r in low if n in moved and moved[n] <= IGNORED_REL]
    ignored_matrices = [n for n, _ in ignored if len(shapes[n]) >= 2]
    ignored_vectors = [n for n, _ in ignored if len(shapes[n]) < 2]
    values["far_below_peers"] = [
        {"name": n, "grad_to_peers": r, "loss_change_when_replaced": moved.get(n)} for n, r in low
    ]
    if len(low) > PROBED_MAX:
        values["notes"] = values["notes"] + [f"{len(low) - PROBED_MAX} more far below their peers, not probed"]

    def shown(items: list[tuple[str, float]]) -> str:
        return name_list([f"{n} ({r:.1e} of its peers')" for n, r in items], limit=3)

    behind = (
        f"; the loss ignores {len(ignored)} more behind them: {name_list([n for n, _ in ignored])}" if ignored else ""
    )
    if flat:
        raise Outcome(
            Status.FAIL,
            f"{len(flat)} parameter(s) get a gradient far below their peers' though the loss depends on them: "
            + shown([(n, r) for n, r, _ in flat])
            + behind,
            values=values,
            causes=[
                f"measured: replacing {flat[0][0]} changes the loss by {flat[0][2]:.2g} (relative), yet its gradient "
                f"is {flat[0][1]:.1e} of its peers': the loss is flat for it where it is, as at the flat end of a "
                "saturated sigmoid or tanh gate, a clamp or a ReLU off for every input, or behind a normalisation "
                "that cancels its scale (a BatchNorm or a second norm after it)"
            ],
            fixes=["initialise the gate or scale where it passes a gradient (sigmoid(0) = 0.5, not sigmoid(-30))"],
        )
    if ignored_matrices:
        raise Outcome(
            Status.WARN,
            f"the loss ignores {len(ignored_matrices)} weight matrix(es): {name_list(ignored_matrices)} "
            f"(replaced with zeros or random values, the loss changes by at most {IGNORED_REL:g} relative)",
            values=values,
            causes=[
                "measured: their gradient is orders of magnitude below their peers' and replacing them does not "
                "change the loss: their branch is cut, multiplied by a constant near zero, or normalised away; "
                "cause not determined beyond that"
            ],
            fixes=["print the branch's output scale in forward; look for a constant factor or a mask on it"],
        )
    if ignored_vectors:
        values["notes"] = values["notes"] + [
            f"the loss ignores {name_list(ignored_vectors)} (gradient {ignored[0][1]:.0e} of its peers', and "
            "replacing it does not change the loss): normalised away by what follows, as the softmax cancels a "
            "key projection's bias or a norm the bias before it; harmless, though it cannot learn"
        ]


def loss_change_when_replaced(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, names: list[str]
) -> dict[str, float]:
    """For each parameter, the largest relative change of the loss when it is replaced by zeros and
    by standard normal values; a non-finite loss counts as a change of inf. Measured in the mode the
    gradient was taken in (train: a norm over the batch may cancel a parameter there and not in
    eval), every forward with the same seed so dropout draws the same masks; the parameters,
    buffers (a norm's running statistics) and the caller's random state are restored after."""
    params = dict(model.named_parameters())
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    gen = torch.Generator().manual_seed(0)

    def loss() -> float:
        torch.manual_seed(0)
        return float(adapter.call_with_loss(model, x, y)[1])

    out: dict[str, float] = {}
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        try:
            base = loss()
            for name in names:
                p = params[name]
                saved = p.detach().clone()
                change = 0.0
                for fill in (torch.zeros(p.shape), torch.randn(p.shape, generator=gen)):
                    p.copy_(fill.to(device=p.device, dtype=p.dtype))
                    now = loss()
                    change = max(change, abs(now - base) / max(1.0, abs(base)) if math.isfinite(now) else math.inf)
                p.copy_(saved)
                out[name] = change
        finally:
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
    return out


def reached_row_ratios(
    params: list[tuple[str, torch.nn.Parameter]], deltas: list[torch.Tensor], before: list[torch.Tensor]
) -> dict[str, float]:
    """For a matrix whose gradient reached only some rows (an embedding: the tokens in the batch),
    its update/weight ratio over those rows: the rows the batch never reached move by weight decay
    alone, which says nothing of how the parameter learns."""
    out = {}
    for (name, p), delta, old in zip(params, deltas, before, strict=True):
        if p.grad is None or p.grad.dim() != 2:
            continue
        rows = p.grad.detach().abs().sum(dim=1) != 0
        if bool(rows.any()) and not bool(rows.all()):
            w = float(old[rows].float().norm())
            if w > 0:
                out[name] = float(delta[rows].float().norm()) / w
    return out


def updates_far_below_peers(
    rows: list[UpdateRow],
    reached: dict[str, float],
    grad_rms: dict[str, float],
    weights: dict[str, torch.Tensor],
    values: OptimizerValues,
) -> None:
    """An update/weight ratio orders of magnitude below its kind's median (`peers.py`; a sparse
    matrix over the rows its gradient reached) warns, with what was measured of it: its weights'
    scale against its peers' (`weights`, as they were before the step), and its gradient against
    AdamW's eps."""
    measured = [{**r, "ratio": reached.get(r["name"], r["ratio"])} for r in rows]
    shapes = {n: tuple(w.shape) for n, w in weights.items()}
    ratios = update_peer_ratios(measured, shapes)
    if ratios:
        values["lowest_to_peers"] = min(ratios.items(), key=lambda nr: nr[1])
    low = far_below(ratios, UPDATE_PEER_FLOOR)
    values["far_below_peers"] = [{"name": n, "update_to_peers": r} for n, r in low]
    if not low:
        return
    name, ratio = low[0]
    weight_rms = {n: float(w.float().pow(2).mean().sqrt()) for n, w in weights.items() if w.numel()}  # before the step
    peers = sorted(v for n, v in weight_rms.items() if kind(shapes[n]) == kind(shapes[name]) and v > 0)
    typical = peers[len(peers) // 2] if peers else 0.0
    causes = []
    if typical > 0 and weight_rms.get(name, 0.0) > 30 * typical:
        causes.append(
            f"measured: {name}'s weights are {weight_rms[name] / typical:.0f}x its peers' (RMS {weight_rms[name]:.3g} "
            f"against {typical:.3g}): AdamW moves each weight by about the learning rate, so a large stored value "
            "barely changes (a gain kept in other units, a scale initialised far from 1)"
        )
    if grad_rms.get(name, 1.0) < 10 * ADAMW_EPS:
        causes.append(
            f"measured: {name}'s gradient (RMS {grad_rms[name]:.2g}) is below AdamW's eps: the step is divided by "
            "eps rather than by the gradient's size"
        )
    if not causes:
        causes.append("cause not determined: its gradient and its weights' scale are within range of its peers'")
    raise Outcome(
        Status.WARN,
        f"{len(low)} parameter(s) barely move under the step: "
        + name_list([f"{n} ({r:.1e} of its peers' update/weight)" for n, r in low], limit=3),
        values=values,
        causes=causes,
        fixes=["store the parameter at the scale it is used at (divide in __init__, not in forward)"],
    )
