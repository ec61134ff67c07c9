"""Checks on what a fresh model computes: logits' shape, its own loss against the cross-entropy of
its logits, the initial loss. What its outputs may depend on (causality, dropout in eval mode) is
`independence_checks`; gradients and the optimizer step `gradient_checks`; non-finite values
`nonfinite_checks`."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.checks import adapter
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status


@check("forward_shapes", "model", "Logits are [B, T, V]; the loss is a finite scalar", depends=("batch_dtype_device",))
def forward_shapes(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, V = check_shape(ctx)
    model = ctx.build_model()
    x, y = ctx.batch(B, T)
    notes: list[str] = []
    logits, loss = adapter.call(model, x, y, notes)
    values: dict[str, Any] = {"batch_shape": [B, T], "logits_shape": list(logits.shape), "expected": [B, T, V]}
    if list(logits.shape) == [B, V, T]:
        raise Outcome(
            Status.FAIL,
            f"logits are {[B, V, T]} ([B, V, T]): vocabulary and time axes swapped",
            values=values,
            causes=[
                "a .transpose(1, 2) or .permute left in forward",
                "logits reshaped for F.cross_entropy and returned that way",
            ],
            fixes=["return logits as (B, T, V); reshape only inside the loss: logits.view(B*T, V)"],
        )
    if list(logits.shape) != [B, T, V]:
        raise Outcome(
            Status.FAIL,
            f"logits shape {list(logits.shape)}, expected {[B, T, V]}",
            values=values,
            causes=["lm_head output size is not vocab_size", "logits flattened to (B*T, V) before returning"],
            fixes=["lm_head = nn.Linear(embedding_dim, vocab_size)"],
        )
    if loss is None:
        raise Outcome(
            Status.FAIL,
            "forward(idx, targets) returned no loss",
            values=values,
            causes=["the loss is only computed in the training script"],
            fixes=["compute F.cross_entropy(logits.view(-1, V), targets.view(-1)) in forward"],
        )
    values["loss_shape"] = list(loss.shape)
    if loss.numel() != 1:
        raise Outcome(
            Status.FAIL,
            f"loss has shape {list(loss.shape)}, expected a scalar",
            values=values,
            causes=["cross_entropy called with reduction='none'"],
            fixes=["reduce with .mean()"],
        )
    values["loss"] = loss.item()
    if not math.isfinite(values["loss"]):
        raise Outcome(
            Status.FAIL,
            f"loss is {values['loss']} on a fresh model",
            values=values,
            causes=["a non-finite weight or an overflow in forward (see nonfinite_localisation)"],
            fixes=["run nonfinite_localisation"],
        )
    plain, note = adapter.full_logits(model, x)
    if note:
        notes.append(note)
    if list(plain.shape) != [B, T, V]:
        # with targets the logits read as (B, T, V); without, generation has to read them too
        values["logits_shape_without_targets"] = list(plain.shape)
        raise Outcome(
            Status.FAIL,
            f"forward(idx) without targets returns logits of shape {list(plain.shape)}, expected {[B, T, V]}",
            values=values,
            causes=["logits flattened to (B*T, V) whatever the call: generation's logits[:, -1, :] cannot read them"],
            fixes=["flatten only inside the loss: F.cross_entropy(logits.view(-1, V), targets.view(-1))"],
        )
    source, fallback = ctx.config_source()
    values["config_source"] = source
    values["notes"] = notes
    summary = f"logits {[B, T, V]}, scalar loss {values['loss']:.4f}"
    tokens = ctx.tokenizer.vocab_size
    if V > tokens:  # a padded vocabulary: the extra rows are never targets; say how much they hold
        extra = logits.detach().float().softmax(-1)[..., tokens:].sum(-1).mean().item()
        values.update(tokenizer_vocab_size=tokens, padded_rows=V - tokens, padded_rows_probability=extra)
        summary += (
            f"; padded vocabulary: {V - tokens} rows past the tokenizer's {tokens} (never targets) "
            f"hold {extra:.1%} of the probability"
        )
    if fallback:  # a checkpoint is there but the fresh model is not its shape: say so
        summary += f"; fresh-model config: {source}"
    return summary, values


LOSS_TOLERANCE = 1e-4  # relative: float32 reductions in another order differ by ~1e-6


@check(
    "loss_matches_logits",
    "model",
    "The model's own loss is the cross-entropy of its logits",
    depends=("forward_shapes",),
)
def loss_matches_logits(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, V = check_shape(ctx)
    model = ctx.build_model().eval()  # eval: dropout must not make two computations differ
    x, y = ctx.batch(B, T)
    if adapter.forward_plan(type(model)).style == "hf":
        return _hf_loss_matches(model, x, V)
    if not adapter.accepts_targets(model):
        raise Outcome(Status.SKIP, "forward takes no targets: the checks use the cross-entropy of its logits")
    with torch.no_grad():
        logits, loss = adapter.unpack(model(x, y))
        if logits.shape[:2] != y.shape:  # last-position-only models give every position with targets
            logits, _ = adapter.full_logits(model, x)
    if loss is None:
        raise Outcome(Status.SKIP, "the model returns no loss of its own: the checks use cross-entropy of its logits")
    flat, targets = logits.float().reshape(-1, V), y.reshape(-1)
    expected = F.cross_entropy(flat, targets).item()
    own = loss.float().mean().item() if loss.numel() > 1 else loss.float().item()
    values: dict[str, Any] = {"model_loss": own, "cross_entropy_of_logits": expected, "loss_shape": list(loss.shape)}
    grad = _own_logit_grad(model, x, y)
    dropped = _unscored_targets(grad, y)
    values.update(dropped or {})
    matched = math.isfinite(own) and abs(own - expected) <= LOSS_TOLERANCE * (1 + abs(expected))
    if matched and not (dropped and dropped["classes_never_scored"]):
        return f"model loss {own:.4f} = mean next-token cross-entropy of its logits {expected:.4f}", values
    terms = _known_terms(logits, y, own, grad) if math.isfinite(own) else None
    if terms is not None and not (dropped and dropped["positions_not_scored"]):
        values["known_terms"] = terms
        return (
            f"model loss {own:.4f} = cross-entropy of its logits {expected:.4f} + {_terms_text(terms)} "
            "(fitted from the loss's gradient and confirmed by its value)",
            values,
        )
    # name the difference only where a candidate reproduces both the loss and its gradient
    matches = _candidate_matches(logits, x, y, own, grad)
    if dropped and dropped["classes_never_scored"] and not set(matches) & UNSCORING:
        _raise_unscored(ctx, dropped, y, values)
    values["explained_by"] = matches
    ratio = own / expected if expected else float("nan")
    raise Outcome(
        Status.FAIL,
        f"model loss {own:.4f} differs from the cross-entropy of its logits {expected:.4f} (x{ratio:.3g})"
        + (f": {matches[0]}" if matches else ""),
        values=values,
        causes=matches
        or [
            "no known form matched (measured: neither the value nor the gradient of the loss is cross-entropy, "
            "z-loss, label smoothing or a term independent of the logits); candidates:",
            "a custom loss that is not next-token cross-entropy",
            "the loss averaged over padding or ignored positions",
        ],
        fixes=_loss_fixes(model, matches),
    )


def _own_logit_grad(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
    """The gradient of the model's own loss with respect to the logits it returned: what the loss
    actually trains, position by position. None when the returned logits are not the ones the loss
    was computed from (detached, recomputed, or not [B, T, V])."""
    with torch.enable_grad():
        logits, loss = adapter.unpack(model(x, y))
        if loss is None or not loss.requires_grad or not logits.requires_grad or logits.shape[:2] != y.shape:
            return None
        (grad,) = torch.autograd.grad(loss.float().sum(), logits, allow_unused=True)
    return None if grad is None else grad.float()


GRAD_FIT = 1e-3  # relative residual of a gradient fit
GRAD_NOISE = 1e-5  # relative: float32 autograd and a softmax computed here agree to ~1e-7


def _known_terms(logits: torch.Tensor, y: torch.Tensor, own: float, grad: torch.Tensor | None) -> dict | None:
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


def _terms_text(terms: dict) -> str:
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


def _candidate_matches(
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


DOUBLE_SHIFT = "the targets are shifted again inside forward (double shift: logits[:, :-1] vs targets[:, 1:])"
ONLY_LAST = "only the last position is scored"
UNSCORING = frozenset({DOUBLE_SHIFT, ONLY_LAST})  # candidates that leave positions unscored by themselves


def _raise_unscored(ctx, dropped: dict, y: torch.Tensor, values: dict) -> None:
    """A class of targets that never trains (the loss can be within a hair of the full mean)."""
    classes = dropped["classes_never_scored"]
    shown = ", ".join(f"{ctx.tokenizer.decode([c])!r} (ID {c})" for c in classes[:6])
    raise Outcome(
        Status.FAIL,
        f"the loss ignores every target {shown}{' and more' if len(classes) > 6 else ''}: "
        f"{dropped['positions_not_scored']} of {y.numel()} positions get no gradient, so those tokens never train",
        values=values,
        causes=[
            "ignore_index set to a real token ID (a pad ID copied from other code)",
            "a mask over the targets (targets != some_id) that drops real tokens",
        ],
        fixes=["score every position: F.cross_entropy(logits.view(-1, V), targets.view(-1)) with no ignore_index"],
    )


def _unscored_targets(grad: torch.Tensor | None, y: torch.Tensor) -> dict | None:
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


def _loss_fixes(model: nn.Module, matches: list[str]) -> list[str]:
    if matches and matches[0].startswith("the targets are shifted again") and adapter.wraps_transformers(model):
        # a wrapper handing the shifted targets to a Hugging Face model, which shifts labels itself
        return ["pass labels=input_ids (the unshifted inputs): the Hugging Face model shifts labels inside"]
    return ["loss = F.cross_entropy(logits.view(-1, V), targets.view(-1)) on raw logits and the shifted targets"]


def _hf_loss_matches(model: nn.Module, x: torch.Tensor, V: int):
    """A Hugging Face model's loss is asked for with labels=input_ids and shifts them inside: its
    loss must be the cross-entropy of logits[:, :-1] against input_ids[:, 1:]."""
    with torch.no_grad():
        logits, loss = adapter.hf_own_loss(model, x)
    if loss is None:
        raise Outcome(Status.SKIP, "the model returns no loss for labels=: the checks use cross-entropy of its logits")
    expected = F.cross_entropy(logits[:, :-1].float().reshape(-1, V), x[:, 1:].reshape(-1)).item()
    own = loss.float().item()
    values: dict[str, Any] = {"model_loss": own, "cross_entropy_of_logits": expected, "called_with": "labels=input_ids"}
    if math.isfinite(own) and abs(own - expected) <= LOSS_TOLERANCE * (1 + abs(expected)):
        return (
            f"model(input_ids, labels=input_ids).loss {own:.4f} = cross-entropy of its logits against the next "
            f"tokens {expected:.4f} (the model shifts labels inside)",
            values,
        )
    terms, grad = _hf_known_terms(model, x, own) if math.isfinite(own) else (None, None)
    if terms is not None:
        values["known_terms"] = terms
        return (
            f"model(input_ids, labels=input_ids).loss {own:.4f} = cross-entropy of its logits against the next "
            f"tokens {expected:.4f} + {_terms_text(terms)} "
            "(fitted from the loss's gradient and confirmed by its value)",
            values,
        )
    matches = _hf_candidate_matches(logits, x, own, grad)
    values["explained_by"] = matches
    raise Outcome(
        Status.FAIL,
        f"model(input_ids, labels=input_ids).loss {own:.4f} differs from the cross-entropy of logits[:, :-1] "
        f"against input_ids[:, 1:] {expected:.4f}" + (f": {matches[0]}" if matches else ""),
        values=values,
        causes=matches
        or [
            "no known form matched; candidates:",
            "a modified loss_function in the model",
            "labels shifted twice inside the model",
        ],
        fixes=["use the model's stock causal-LM loss (ForCausalLMLoss)"],
    )


HF_NOT_SHIFTED = "the labels are not shifted inside forward: each position is scored on its own input token"
HF_SHIFTED_TWICE = "the labels are shifted twice inside forward: logits[:, :-2] vs input_ids[:, 2:]"


def _hf_candidate_matches(logits: torch.Tensor, x: torch.Tensor, own: float, grad: torch.Tensor | None) -> list[str]:
    """Shift bugs of a labels= loss whose formula reproduces the loss's value and, where known, its gradient."""
    V = logits.shape[-1]
    z = logits.detach().float().requires_grad_()
    candidates = {
        HF_NOT_SHIFTED: lambda: F.cross_entropy(z.reshape(-1, V), x.reshape(-1)),
        HF_SHIFTED_TWICE: lambda: F.cross_entropy(z[:, :-2].reshape(-1, V), x[:, 2:].reshape(-1)),
    }
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


def _hf_known_terms(model: nn.Module, x: torch.Tensor, own: float) -> tuple[dict | None, torch.Tensor | None]:
    """The Hugging Face loss as cross-entropy of the next tokens plus known terms (a Mixture of
    Experts' load-balancing loss is a term the logits do not enter), fitted as `_known_terms` does.
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
    return _known_terms(logits[:, :-1], x[:, 1:], own, grad[:, :-1]), grad


def _logits_ce(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    logits, _ = adapter.full_logits(model, x)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)).item()


@check("initial_loss", "model", "A fresh model's loss is near log(V)", depends=("forward_shapes", "batch_shift"))
def initial_loss(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, V = check_shape(ctx)
    model = ctx.build_model().eval()
    expected = math.log(V)
    # the cross-entropy of the logits, not the model's own loss: this check is about the scale of the
    # initial logits; whether the model's loss code is right is loss_matches_logits' question
    with torch.no_grad():
        losses = [_logits_ce(model, *ctx.batch(B, T, seed=s)) for s in range(4)]
        loss = sum(losses) / len(losses)
        x, y = ctx.batch(B, T)
        zero_loss = _logits_ce(model, torch.zeros_like(x), y)
    counts = torch.bincount(ctx.splits["train"].long().clamp(0, V - 1), minlength=V).double()
    probs = counts[counts > 0] / counts.sum()
    unigram = float(-(probs * probs.log()).sum())
    margin = max(0.5, 0.15 * expected)
    values = {
        "initial_loss": loss,
        "expected_baseline": expected,
        "zeroed_input_loss": zero_loss,
        "unigram_entropy": unigram,
        "margin": margin,
    }
    if loss > expected + margin:
        raise Outcome(
            Status.FAIL,
            f"initial loss {loss:.3f} is far above log(V) = {expected:.3f}",
            values=values,
            causes=[
                "extreme initial logits: weights initialised with std ~1 instead of ~0.02",
                "a temperature/scale applied to logits",
                "the residual stream grows with depth",
            ],
            fixes=["nn.init.normal_(w, std=0.02); zero biases; scale residual projections by 1/sqrt(2*layers)"],
        )
    if loss < expected - margin:
        raise Outcome(
            Status.FAIL,
            f"initial loss {loss:.3f} is far below log(V) = {expected:.3f} before training",
            values=values,
            causes=[
                "the targets leak into the inputs (targets not shifted)",
                "the model can see future tokens",
                "the loss is averaged over padding or ignored tokens",
            ],
            fixes=["run batch_shift and causal_independence"],
        )
    return f"initial loss {loss:.3f} vs log(V) {expected:.3f}; zeroed inputs {zero_loss:.3f}", values
