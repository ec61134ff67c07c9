"""What a model's own loss is made of, read from its value and from the gradient it gives each logit:
cross-entropy plus terms added on purpose (z-loss, label smoothing, a term the logits do not enter),
or the formula of a known loss bug; and which targets it never scores. `loss_matches_logits`
(model_checks) judges with it."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.checks import adapter

LOSS_TOLERANCE = 1e-4  # relative: float32 reductions in another order differ by ~1e-6
GRAD_FIT = 1e-3  # relative residual of a gradient fit
GRAD_NOISE = 1e-5  # relative: float32 autograd and a softmax computed here agree to ~1e-7


def own_logit_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """The gradient of the model's own loss with respect to the logits it returned: what the loss
    actually trains, position by position. None when the returned logits are not the ones the loss
    was computed from (detached, recomputed, or not [B, T, V])."""
    with torch.enable_grad():
        logits, loss = adapter.unpack(model(x, y))
        if loss is None or not loss.requires_grad or not logits.requires_grad or logits.shape[:2] != y.shape:
            return None
        (grad,) = torch.autograd.grad(loss.float().sum(), logits, allow_unused=True)
    return None if grad is None else grad.float()


def unscored_targets(grad: torch.Tensor | None, y: torch.Tensor) -> dict | None:
    """Which targets the model's own loss never scores: a position whose logits get exactly zero
    gradient from the loss is not in it. Returns the count and the target IDs none of whose
    positions is scored (a whole class that never trains); None when the gradient is unknown."""
    if grad is None:
        return None
    scored = grad.abs().amax(dim=-1) > 0  # (B, T)
    ids = y.flatten()
    ever = torch.zeros(int(ids.max()) + 1, dtype=torch.bool, device=ids.device)
    ever[ids[scored.flatten()]] = True
    never = sorted({int(i) for i in ids[~scored.flatten()].tolist() if not ever[i]})
    return {"positions_not_scored": int((~scored).sum()), "classes_never_scored": never}


def known_terms(logits: torch.Tensor, y: torch.Tensor, own: float, grad: torch.Tensor | None) -> dict | None:
    """The model's loss as cross-entropy plus terms practitioners add on purpose, fitted from the
    gradient the loss gives each logit and accepted only when the fitted terms also reproduce the
    loss's value:

    - z-loss, c * mean(logsumexp(z)^2): adds 2c * lse * softmax(z) to each position's gradient;
    - label smoothing eps: moves eps * (onehot - 1/V) of each position's gradient;
    - a term that does not depend on the logits (a weight penalty, a load-balancing loss): leaves
      the gradient exactly cross-entropy's and shows only in the value.
    """
    if grad is None:
        return None
    z = logits.detach().float().reshape(-1, logits.size(-1))
    n, V = z.shape
    onehot = F.one_hot(y.reshape(-1), V).float()
    probs, lse = z.softmax(-1), torch.logsumexp(z, -1)
    residual = (grad.reshape(n, V) * n - (probs - onehot)).flatten()
    scale = (probs - onehot).norm().item()
    bases = {"z_loss": (2 * lse[:, None] * probs).flatten(), "label_smoothing": (onehot - 1.0 / V).flatten()}
    names = [k for k, b in bases.items() if b.norm().item() > 0]
    coef = {name: 0.0 for name in bases}
    if residual.norm().item() > GRAD_NOISE * scale and names:
        basis = torch.stack([bases[k] for k in names], dim=1).double()
        fit = torch.linalg.lstsq(basis, residual.double()[:, None]).solution.flatten()
        left = (residual.double() - basis @ fit).norm().item()
        if left > GRAD_FIT * scale or left > 0.05 * residual.norm().item():
            return None  # the gradient is not cross-entropy's plus these terms
        for name, c in zip(names, fit.tolist()):
            if abs(c) * bases[name].norm().item() > GRAD_NOISE * scale:
                coef[name] = float(c)
    ce_rows = -(z.log_softmax(-1) * onehot).sum(-1)
    uniform_rows = -z.log_softmax(-1).mean(-1)
    value = (
        (1 - coef["label_smoothing"]) * ce_rows.mean().item()
        + coef["label_smoothing"] * uniform_rows.mean().item()
        + coef["z_loss"] * lse.pow(2).mean().item()
    )
    terms = {k: v for k, v in coef.items() if v}
    rest = own - value
    if abs(rest) > LOSS_TOLERANCE * (1 + abs(own)):
        terms["independent_of_logits"] = rest
    if not terms or any(v < 0 for k, v in terms.items() if k != "independent_of_logits"):
        return None
    if not 0 < terms.get("label_smoothing", 0.5) < 1:
        return None
    return terms


def terms_text(terms: dict) -> str:
    """Fitted terms in words: "z-loss 0.0001 * logsumexp^2 + label smoothing 0.1"."""
    parts = []
    if "z_loss" in terms:
        parts.append(f"z-loss {terms['z_loss']:.2g} * logsumexp^2")
    if "label_smoothing" in terms:
        parts.append(f"label smoothing {terms['label_smoothing']:.3g}")
    if "independent_of_logits" in terms:
        parts.append(
            f"a term of {terms['independent_of_logits']:.4g} that does not depend on the logits "
            "(a weight penalty or auxiliary loss)"
        )
    return " + ".join(parts)


DOUBLE_SHIFT = "the targets are shifted again inside forward (double shift: logits[:, :-1] vs targets[:, 1:])"
ONLY_LAST = "only the last position is scored"
UNSCORING = frozenset({DOUBLE_SHIFT, ONLY_LAST})  # candidates that leave positions unscored by themselves


def candidate_matches(
    logits: torch.Tensor, x: torch.Tensor, y: torch.Tensor, own: float, grad: torch.Tensor | None
) -> list[str]:
    """Loss bugs seen in real model code whose formula, applied to these logits, reproduces the
    model's loss value and (where the gradient is known) its gradient."""
    B, _, V = logits.shape
    z = logits.detach().float().requires_grad_()
    flat, targets = z.reshape(-1, V), y.reshape(-1)
    candidates = {
        "the loss is computed on probabilities (softmax before F.cross_entropy)": lambda: F.cross_entropy(
            flat.softmax(-1), targets
        ),
        DOUBLE_SHIFT: lambda: F.cross_entropy(z[:, :-1].reshape(-1, V), y[:, 1:].reshape(-1)),
        "reduction='sum' instead of the mean": lambda: F.cross_entropy(flat, targets, reduction="sum"),
        "summed over positions, averaged over the batch": lambda: F.cross_entropy(flat, targets, reduction="sum") / B,
        ONLY_LAST: lambda: F.cross_entropy(z[:, -1], y[:, -1]),
        "the loss compares logits with the inputs instead of the targets": lambda: F.cross_entropy(flat, x.reshape(-1)),
    }
    return _reproducing(candidates, z, own, grad)


HF_NOT_SHIFTED = "the labels are not shifted inside forward: each position is scored on its own input token"
HF_SHIFTED_TWICE = "the labels are shifted twice inside forward: logits[:, :-2] vs input_ids[:, 2:]"


def hf_candidate_matches(logits: torch.Tensor, x: torch.Tensor, own: float, grad: torch.Tensor | None) -> list[str]:
    """Shift bugs of a labels= loss whose formula reproduces the loss's value and, where known, its gradient."""
    V = logits.shape[-1]
    z = logits.detach().float().requires_grad_()
    candidates = {
        HF_NOT_SHIFTED: lambda: F.cross_entropy(z.reshape(-1, V), x.reshape(-1)),
        HF_SHIFTED_TWICE: lambda: F.cross_entropy(z[:, :-2].reshape(-1, V), x[:, 2:].reshape(-1)),
    }
    return _reproducing(candidates, z, own, grad)


def hf_known_terms(model: nn.Module, x: torch.Tensor, own: float) -> tuple[dict | None, torch.Tensor | None]:
    """The Hugging Face loss as cross-entropy of the next tokens plus known terms (a Mixture of
    Experts' load-balancing loss is a term the logits do not enter), fitted as `known_terms` does.
    The last position has no next token: its logits must get no gradient. Returns the terms (None
    when none fits) and the loss's gradient with respect to the logits (None when unknown)."""
    with torch.enable_grad():
        logits, loss = adapter.hf_own_loss(model, x)
        if loss is None or not loss.requires_grad or not logits.requires_grad:
            return None, None
        (grad,) = torch.autograd.grad(loss.float().sum(), logits, allow_unused=True)
    if grad is None:
        return None, None
    grad = grad.float()
    if grad[:, -1].abs().max().item() > 0:
        return None, grad
    return known_terms(logits[:, :-1], x[:, 1:], own, grad[:, :-1]), grad


def _reproducing(
    candidates: dict[str, Callable[[], torch.Tensor]], z: torch.Tensor, own: float, grad: torch.Tensor | None
) -> list[str]:
    """The candidates whose formula, computed from the logits `z`, gives the model's loss value and
    (where the gradient is known) its gradient with respect to the logits."""
    matches = []
    for why, formula in candidates.items():
        with torch.enable_grad():
            value = formula()
            (g,) = torch.autograd.grad(value, z)
        if abs(own - value.item()) > LOSS_TOLERANCE * (1 + abs(own)):
            continue
        if grad is not None and (g - grad).norm().item() > GRAD_FIT * (grad.norm().item() + 1e-12):
            continue
        matches.append(why)
    return matches
