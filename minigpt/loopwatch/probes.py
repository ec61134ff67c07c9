"""What the watch reads off one forward or backward, as pure functions of tensors.

Everything here returns tensors left on the model's device (no host sync): the watch stacks them
and moves them to the host in one transfer per flush.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from minigpt.loopwatch.runlog import loss_weight_of

# argument names under which loops pass token IDs and targets (nanoGPT, minGPT, Hugging Face)
INPUT_NAMES = ("idx", "input_ids", "x", "inputs", "tokens")
TARGET_NAMES = ("targets", "labels", "y", "target")
FINGERPRINT_ELEMENTS = 4096  # IDs that enter a batch's fingerprint (evenly spaced)
LOSS_ROWS = 128  # logits rows the loss-weight estimate reads (evenly spaced)


@dataclass
class ForwardInputs:
    ids: torch.Tensor | None  # integer token IDs (B, T)
    targets: torch.Tensor | None
    target_name: str | None  # "targets", "labels", ... or "positional" for a second argument


def forward_inputs(args: tuple, kwargs: Mapping) -> ForwardInputs:
    """Token IDs and targets of a forward call, by position or by the usual names."""
    if not kwargs and len(args) <= 2:  # the usual model(idx) / model(idx, targets): no name lookups
        ids = args[0] if args and is_ids(args[0]) else None
        targets = args[1] if ids is not None and len(args) == 2 and is_ids(args[1]) else None
        if ids is not None or not args:
            return ForwardInputs(ids, targets, "positional" if targets is not None else None)
    ids = next((kwargs[k] for k in INPUT_NAMES if is_ids(kwargs.get(k))), None)
    rest = list(args)
    if ids is None and rest and is_ids(rest[0]):
        ids = rest.pop(0)
    elif ids is None and rest and isinstance(rest[0], Mapping):  # model(batch) with a dict batch
        return forward_inputs((), rest[0])
    for name in TARGET_NAMES:
        if is_ids(kwargs.get(name)):
            return ForwardInputs(ids, kwargs[name], name)
    if rest and is_ids(rest[0]):
        return ForwardInputs(ids, rest[0], "positional")
    return ForwardInputs(ids, None, None)


def is_ids(value: object) -> bool:
    return isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex()


def model_outputs(output: object) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(logits, loss) of a forward's output: a tuple/list `(logits, loss)`, logits alone, a dict or
    an object with `.logits`/`.loss` (Hugging Face's ModelOutput). Either may be None."""
    if type(output) is tuple and len(output) == 2:  # nanoGPT's (logits, loss): read on every forward
        logits, loss = output
        if _is_logits(logits) and (loss is None or _scalar(loss) is not None):
            return logits, loss
    if isinstance(output, torch.Tensor):
        return (output, None) if output.dim() >= 2 and output.is_floating_point() else (None, _scalar(output))
    if isinstance(output, Mapping) or hasattr(output, "logits"):
        get = output.get if isinstance(output, Mapping) else lambda k: getattr(output, k, None)
        logits = get("logits")
        return (logits if _is_logits(logits) else None), _scalar(get("loss"))
    if isinstance(output, tuple | list):
        logits = next((o for o in output if _is_logits(o)), None)
        loss = next((s for o in output if (s := _scalar(o)) is not None), None)
        return logits, loss
    return None, None


def _is_logits(value: object) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 2 and value.is_floating_point()


def _scalar(value: object) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point():
        return value
    return None


class Fingerprinter:
    """A batch's fingerprint: a fixed pseudo-random integer combination of (up to 4096 evenly
    spaced) token IDs. Equal batches give equal fingerprints; different ones almost never do. Its
    coefficients come from a private generator: the user's RNG streams are never touched."""

    def __init__(self, seed: int = 0x5EED):
        self.seed = seed
        self._coef: dict[tuple, torch.Tensor] = {}

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.detach().reshape(-1)
        if flat.numel() > FINGERPRINT_ELEMENTS:
            flat = flat[:: flat.numel() // FINGERPRINT_ELEMENTS][:FINGERPRINT_ELEMENTS]
        flat = flat.long()
        key = (flat.device, flat.numel())
        coef = self._coef.get(key)
        if coef is None:
            gen = torch.Generator().manual_seed(self.seed)
            coef = torch.randint(1, 2**31 - 1, (flat.numel(),), generator=gen, dtype=torch.long).to(flat.device)
            self._coef[key] = coef
        if flat.device.type == "cpu":  # one kernel for the product and the sum (CUDA has no integer dot)
            return torch.dot(flat + 1, coef)  # +1: an all-zero batch is not the empty fingerprint
        return ((flat + 1) * coef).sum()


def target_relation(ids: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, list[int]] | None:
    """How many targets equal the inputs, and how many equal the inputs shifted by one, as counts
    left on the device with the numbers of positions each is out of (`runlog.relation_shares`
    divides on the host); None when the shapes are not (B, T) alike (then nothing can be said)."""
    if ids.shape != targets.shape or ids.dim() < 1 or ids.shape[-1] < 2:
        return None
    ids, targets = ids.detach(), targets.detach()
    counts = torch.stack([(ids == targets).sum(), (ids[..., 1:] == targets[..., :-1]).sum()])
    n = ids.numel()
    return counts, [n, n - n // ids.shape[-1]]


def row_step(n_rows: int) -> int:
    """The stride that picks up to LOSS_ROWS evenly spaced rows out of `n_rows`."""
    return max(1, n_rows // LOSS_ROWS)


def sampled_rows(logits: torch.Tensor) -> torch.Tensor:
    """A float32 copy of up to LOSS_ROWS evenly spaced rows of (..., V) logits (small: never the
    whole tensor, which may be gigabytes at GPT-2 size)."""
    flat = logits.detach().reshape(-1, logits.shape[-1])
    return flat[:: row_step(flat.shape[0])][:LOSS_ROWS].float().clone()


def grad_rows(grad: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, int]:
    """The gradient of the `n_rows` rows `sampled_rows` took, as a float32 copy (the logits' whole
    gradient is freed after the backward), and the number of rows in all: what `loss_weight_batch`
    needs of one backward when the watch computes it later."""
    g, n_total = _sampled_grad(grad, n_rows)
    return (g.clone() if g.dtype == torch.float32 else g.float()), n_total


def _sampled_grad(grad: torch.Tensor, n_rows: int) -> tuple[torch.Tensor, int]:
    flat = grad.detach().reshape(-1, grad.shape[-1])
    return flat[:: row_step(flat.shape[0])][:n_rows], flat.shape[0]


def loss_weight_sums(grad: torch.Tensor, rows: torch.Tensor) -> list:
    """From the gradient that reached the logits, how much of a mean cross-entropy this backward
    carried, as sums left on the device: `[sums, n_rows, n_total]`, which `runlog.loss_weight_of`
    turns into [weight, misfit, loss, share] on the host (see `loss_weight_batch`)."""
    g, n_total = _sampled_grad(grad, rows.shape[0])
    return [loss_weight_batch(g.float().unsqueeze(0), rows.unsqueeze(0))[0], g.shape[0], n_total]


def loss_weight_batch(g: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """The loss-weight sums of k backwards at once: `g` and `rows` are (k, R, V), the sampled rows'
    float32 gradients and logits; returns (k, 5), each row `[c, sum of the rows' misfits, sum of their
    cross-entropies, rows with a gradient, sum of the squared cross-entropies]` (the watch computes a
    second's backwards in one go; the squares give the sampled loss's standard error).

    For a loss `w * mean CE` over N rows, each row's gradient is `w / N * (softmax - onehot)`; its
    target is the one negative entry. So `c = -g_t / (1 - p_t)` is `w / N` on every row, and
    `weight = c * N` is 1 for an undivided micro-batch loss, 1/K for `loss / K`, N for
    `reduction='sum'`. `misfit` is how far the rows are from that form (0 for cross-entropy,
    large for another loss: then the weight means nothing). `loss` is the cross-entropy of the
    sampled rows at their targets: the loss of a loop whose model returns logits only.
    """
    p = torch.softmax(rows, dim=-1)
    t = g.argmin(dim=-1, keepdim=True)  # (k, R, 1)
    g_abs = g.abs().sum(-1)  # (k, R); three times quicker than vector_norm(g, 1, dim=-1) on CPU
    has = g_abs.sign()  # 1 on rows the loss reached, 0 on the others
    gt = g.gather(-1, t).squeeze(-1)
    pt = p.gather(-1, t).squeeze(-1)
    # every sum over the rows with a gradient is a product with `has`: one kernel for all four
    log_pt = pt.clamp_min(1e-30).log()
    sums = (torch.stack([gt, pt, log_pt, log_pt * log_pt, has], dim=1) @ has.unsqueeze(-1)).squeeze(-1)
    g_sum, p_sum, log_sum, log_sq_sum, n_has = sums.unbind(-1)  # each (k,)
    # c = -g_t / (1 - p_t) on every row; pooled with weights (1 - p_t), so rows the model already
    # predicts with certainty (0 / 0) do not decide it
    c = -g_sum / (n_has - p_sum).clamp_min(1e-12)
    cb = c[:, None, None]
    residual = torch.addcmul(g, p, cb, value=-1).scatter_add_(-1, t, cb.expand(t.shape))  # g - c * (p - onehot)
    misfit_sum = ((residual.abs().sum(-1) / g_abs.clamp_min(1e-30)) * has).sum(-1)
    return torch.stack([c, misfit_sum, -log_sum, n_has, log_sq_sum], dim=-1)


def loss_weight(grad: torch.Tensor, rows: torch.Tensor) -> list[float]:
    """[weight, misfit, loss, share, loss's standard error] of one backward (see `loss_weight_sums`),
    read on the host now."""
    sums, n_rows, n_total = loss_weight_sums(grad, rows)
    return loss_weight_of(sums.tolist(), n_rows, n_total)


def to_host(records: list[dict]) -> list[dict]:
    """Replace every tensor in the records by Python numbers, in one transfer per dtype."""
    floats: list[torch.Tensor] = []
    ints: list[torch.Tensor] = []

    plain = {int, float, bool, str, type(None)}  # most values: nothing to look into (checked inline,
    # not by a call each: a flush holds thousands of them, parameter names and shapes among them)

    def collect(value: object) -> None:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        for v in items:
            if type(v) in plain:
                continue
            if isinstance(v, torch.Tensor):
                (ints if not v.is_floating_point() else floats).append(v)
            else:
                collect(v)

    collect(records)
    host: dict[int, Any] = {}
    for group, dtype in ((floats, torch.float32), (ints, torch.long)):
        if not group:
            continue
        group = [t for t in group if t.dim() == 0] + [t for t in group if t.dim() != 0]  # scalars first
        flat = _on_host(group, dtype).tolist()  # one sync
        i = 0
        for t in group:
            n = t.numel()
            host[id(t)] = flat[i] if t.dim() == 0 else flat[i : i + n]
            i += n

    def convert(value: object) -> Any:
        if isinstance(value, torch.Tensor):
            return host[id(value)]
        if isinstance(value, dict):
            return {k: v if type(v) in plain else convert(v) for k, v in value.items()}
        if isinstance(value, list):
            return [v if type(v) in plain else convert(v) for v in value]
        return value  # a tuple or an object: left as it is, as `collect` left it

    return [convert(r) for r in records]


def _on_host(group: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """The tensors of `group` (its scalars first), flattened into one `dtype` tensor on the host: one
    concatenation on their device (most are scalars, and a copy each would cost more than the flush's
    other work), or one copy each when they are on several devices."""
    with torch.no_grad():
        try:
            # most are scalars (losses, norms), first in `group`: one stack for them, not a reshape each
            scalars = sum(1 for t in group if t.dim() == 0)
            parts = [torch.stack(group[:scalars])] if scalars else []
            return torch.cat(parts + [t.reshape(-1) for t in group[scalars:]]).to(dtype).cpu()
        except RuntimeError:  # tensors on several devices (a model split across GPUs), or dtypes stack refuses
            return torch.cat([t.detach().reshape(-1).to(dtype).cpu() for t in group])
