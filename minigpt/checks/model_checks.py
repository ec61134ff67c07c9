"""Checks on what a fresh model computes: logits' shape, its own loss against the cross-entropy of
its logits (what else that loss is made of: `loss_fit`), the initial loss. What its outputs may
depend on (causality, dropout in eval mode) is `independence_checks`; gradients and the optimizer
step `gradient_checks`; non-finite values `nonfinite_checks`."""

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
from minigpt.checks.loss_fit import (
    LOSS_TOLERANCE,
    UNSCORING,
    candidate_matches,
    hf_candidate_matches,
    hf_known_terms,
    known_terms,
    own_logit_grad,
    terms_text,
    unscored_targets,
)
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
    grad = own_logit_grad(model, x, y)
    dropped = unscored_targets(grad, y)
    values.update(dropped or {})
    matched = math.isfinite(own) and abs(own - expected) <= LOSS_TOLERANCE * (1 + abs(expected))
    if matched and not (dropped and dropped["classes_never_scored"]):
        return f"model loss {own:.4f} = mean next-token cross-entropy of its logits {expected:.4f}", values
    terms = known_terms(logits, y, own, grad) if math.isfinite(own) else None
    if terms is not None and not (dropped and dropped["positions_not_scored"]):
        values["known_terms"] = terms
        return (
            f"model loss {own:.4f} = cross-entropy of its logits {expected:.4f} + {terms_text(terms)} "
            "(fitted from the loss's gradient and confirmed by its value)",
            values,
        )
    # name the difference only where a candidate reproduces both the loss and its gradient
    matches = candidate_matches(logits, x, y, own, grad)
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


def _raise_unscored(ctx: CheckContext, dropped: dict, y: torch.Tensor, values: dict) -> None:
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


def _loss_fixes(model: nn.Module, matches: list[str]) -> list[str]:
    if matches and matches[0].startswith("the targets are shifted again") and adapter.wraps_transformers(model):
        # a wrapper handing the shifted targets to a Hugging Face model, which shifts labels itself
        return ["pass labels=input_ids (the unshifted inputs): the Hugging Face model shifts labels inside"]
    return ["loss = F.cross_entropy(logits.view(-1, V), targets.view(-1)) on raw logits and the shifted targets"]


def _hf_loss_matches(model: nn.Module, x: torch.Tensor, V: int) -> CheckReturn:
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
    terms, grad = hf_known_terms(model, x, own) if math.isfinite(own) else (None, None)
    if terms is not None:
        values["known_terms"] = terms
        return (
            f"model(input_ids, labels=input_ids).loss {own:.4f} = cross-entropy of its logits against the next "
            f"tokens {expected:.4f} + {terms_text(terms)} "
            "(fitted from the loss's gradient and confirmed by its value)",
            values,
        )
    matches = hf_candidate_matches(logits, x, own, grad)
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
