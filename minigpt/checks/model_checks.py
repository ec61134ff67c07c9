"""Checks on what a fresh model computes: logits' shape, its own loss against the cross-entropy of
its logits, the initial loss, causality (eval and train mode) and determinism in eval mode.
Gradients and the optimizer step are `gradient_checks`; non-finite values `nonfinite_checks`."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import adapter
from .data_checks import DEBUG_BATCH_SIZE, _block
from .registry import check
from .result import Outcome, Status


def _names(names: list[str], limit: int = 4) -> str:
    """Parameter names for a sentence: the first few, then how many more."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _shape_T(ctx) -> tuple[int, int, int]:
    vocab = ctx.tokenizer.vocab_size
    T = _block(ctx)
    if T == vocab:  # [B, T, V] and [B, V, T] would look alike
        T -= 1
    return DEBUG_BATCH_SIZE, T, vocab


@check("forward_shapes", "model", "Logits are [B, T, V]; the loss is a finite scalar", depends=("batch_dtype_device",))
def forward_shapes(ctx, run):
    B, T, V = _shape_T(ctx)
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
    _, note = adapter.full_logits(model, x)
    if note:
        notes.append(note)
    source, fallback = ctx.config_source()
    values["config_source"] = source
    values["notes"] = notes
    summary = f"logits {[B, T, V]}, scalar loss {values['loss']:.4f}"
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
def loss_matches_logits(ctx, run):
    B, T, V = _shape_T(ctx)
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
    dropped = _unscored_targets(model, x, y)
    values.update(dropped or {})
    matched = math.isfinite(own) and abs(own - expected) <= LOSS_TOLERANCE * (1 + abs(expected))
    if matched and not (dropped and dropped["classes_never_scored"]):
        return f"model loss {own:.4f} = mean next-token cross-entropy of its logits {expected:.4f}", values
    # name the difference: each candidate is a loss bug we have seen in real model code
    candidates = {
        "the loss is computed on probabilities (softmax before F.cross_entropy)": F.cross_entropy(
            flat.softmax(-1), targets
        ),
        DOUBLE_SHIFT: (F.cross_entropy(logits[:, :-1].float().reshape(-1, V), y[:, 1:].reshape(-1))),
        "reduction='sum' instead of the mean": F.cross_entropy(flat, targets, reduction="sum"),
        "summed over positions, averaged over the batch": F.cross_entropy(flat, targets, reduction="sum") / B,
        ONLY_LAST: F.cross_entropy(logits[:, -1].float(), y[:, -1]),
        "the loss compares logits with the inputs instead of the targets": F.cross_entropy(flat, x.reshape(-1)),
    }
    matches = [why for why, value in candidates.items() if abs(own - value.item()) <= 1e-3 * (1 + abs(own))]
    # the gradient is a measurement, a matching candidate a coincidence at 1e-3, unless it is one of
    # the bugs that leave positions unscored themselves
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
            "label smoothing, an auxiliary loss or a regulariser added to the loss (deliberate? then ignore)",
            "a custom loss that is not next-token cross-entropy",
            "the loss averaged over padding or ignored positions",
        ],
        fixes=_loss_fixes(model, matches),
    )


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


def _unscored_targets(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict | None:
    """Which targets the model's own loss never scores: a position whose logits get exactly zero
    gradient from the loss is not in it. Returns the count and the target IDs none of whose
    positions is scored (a whole class that never trains); None when the returned logits are not
    the ones the loss was computed from."""
    with torch.enable_grad():
        logits, loss = adapter.unpack(model(x, y))
        if loss is None or not loss.requires_grad or not logits.requires_grad or logits.shape[:2] != y.shape:
            return None
        (grad,) = torch.autograd.grad(loss.float().sum(), logits, allow_unused=True)
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
    raise Outcome(
        Status.FAIL,
        f"model(input_ids, labels=input_ids).loss {own:.4f} differs from the cross-entropy of logits[:, :-1] "
        f"against input_ids[:, 1:] {expected:.4f}",
        values=values,
        causes=["a modified loss_function or label smoothing in the model", "labels shifted twice inside the model"],
        fixes=["use the model's stock causal-LM loss (ForCausalLMLoss)"],
    )


def _logits_ce(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    logits, _ = adapter.full_logits(model, x)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)).item()


@check("initial_loss", "model", "A fresh model's loss is near log(V)", depends=("forward_shapes", "batch_shift"))
def initial_loss(ctx, run):
    B, T, V = _shape_T(ctx)
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


def _embedding_module(model: nn.Module, vocab: int) -> nn.Module | None:
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.num_embeddings == vocab:
            return module
    return None


@check("causal_independence", "model", "Position t never sees t+1, in eval and train mode", depends=("forward_shapes",))
def causal_independence(ctx, run):
    _, T, V = _shape_T(ctx)
    model = ctx.build_model()
    x, _ = ctx.batch(1, T)
    cuts = sorted({max(0, T // 4 - 1), T // 2 - 1, (3 * T) // 4 - 1})
    values: dict = {"cuts": cuts, "unzeroed_parameters": _unzero(model)}
    leaks: dict[str, int] = {}  # mode -> first leaking position
    emb = _embedding_module(model, V)
    if emb is None:
        values["gradient_test"] = "skipped: no nn.Embedding with vocab_size rows found"
    # some layers mix positions only in train mode (batch statistics over time, say): probe both
    # modes, with the randomness (dropout masks) pinned so that only a real leak shows
    for mode in ("eval", "train"):
        model.train(mode == "train")
        first, worst = _value_leak(model, x, V, cuts, seed=ctx.options.seed + 7)
        values[f"max_prefix_change_{mode}"] = worst
        if emb is not None:
            grad_leak = _gradient_leak(model, emb, x, V)
            values[f"gradient_leak_position_{mode}"] = grad_leak
            if grad_leak is not None:
                first = grad_leak if first is None else min(first, grad_leak)
        if first is not None:
            leaks[mode] = first
    model.eval()
    values["first_leaking_position"] = min(leaks.values()) if leaks else None
    values["leaking_modes"] = sorted(leaks)
    if not leaks:
        _prefix_probe(model, x, values)
    if leaks:
        only_train = set(leaks) == {"train"}
        where = " (in train mode only)" if only_train else ""
        raise Outcome(
            Status.FAIL,
            f"position {min(leaks.values())} changes when later tokens change{where}: the model sees the future",
            values=values,
            causes=(
                [
                    "a layer that mixes positions only in train mode: BatchNorm over (batch, time), or statistics "
                    "computed across the sequence while training"
                ]  # fmt: skip
                if only_train
                else []
            )
            + [
                "attention without a causal mask (is_causal=False, or mask not applied)",
                "the mask built with the wrong diagonal (tril vs triu, or offset 1)",
                "a layer mixing across time (e.g. a non-causal convolution or normalisation over T)",
            ],
            fixes=[
                "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
                "scores.masked_fill(torch.triu(ones(T, T), 1).bool(), -inf)",
                "normalise over channels only (LayerNorm/RMSNorm), never over time or the batch",
            ],
        )
    worst_change = max(values["max_prefix_change_eval"], values["max_prefix_change_train"])
    return (
        f"prefix logits unchanged when the suffix changes, in eval and train mode (max change {worst_change:.1e}); "
        "no gradient to later inputs",
        values,
    )


PREFIX_LENGTHS = (0.25, 0.5)  # prompts shorter than the context, as fractions of T


def _prefix_probe(model: nn.Module, x: torch.Tensor, values: dict) -> None:
    """A prompt shorter than the context must be embedded as it was in training: the logits of a
    prefix alone equal the logits at the same positions inside the longer sequence (a causal
    model's position t sees tokens 0..t only). Positions counted from the end (`pos[-T:]`), an
    offset computed from the length, or a mask sized for the full context break it at every
    length but the training one."""
    T = x.shape[1]
    with torch.no_grad():
        full, _ = adapter.full_logits(model, x)
        scale = 1e-4 * (1 + full.abs().max().item())
        again, _ = adapter.full_logits(model, x)
        if (again - full).abs().max().item() > scale:  # noise in eval mode would read as a mismatch
            values["prefix_probe"] = "not run: two eval-mode passes differ (see eval_determinism)"
            return
        for frac in PREFIX_LENGTHS:
            t = max(2, int(T * frac))
            if t >= T:
                continue
            try:
                alone, _ = adapter.full_logits(model, x[:, :t])
            except (RuntimeError, ValueError, IndexError, AssertionError) as exc:  # a fixed-length model
                values["prefix_probe"] = f"not run: forward on {t} tokens raised {type(exc).__name__}: {exc}"[:300]
                return
            diff = (alone[0, :t] - full[0, :t]).abs().amax(dim=-1)
            bad = (diff > scale).nonzero().flatten()
            if len(bad):
                first = int(bad[0].item())
                values.update(prefix_length=t, prefix_first_mismatch=first, prefix_max_change=diff.max().item())
                raise Outcome(
                    Status.FAIL,
                    f"a {t}-token prompt is computed differently from the same {t} tokens inside a {T}-token "
                    f"sequence (position {first} changes by {diff.max().item():.3g}): positions depend on the length",
                    values=values,
                    causes=[
                        "positions counted from the end: pos_emb[-T:] or arange(block_size - T, block_size)",
                        "a position offset or mask computed from the full context length instead of T",
                        "padding added to the full length that attention does not mask out",
                    ],
                    fixes=[
                        "pos = torch.arange(0, T); x = tok_emb + pos_emb[pos] (positions start at 0 for every length)",
                        "slice buffers to the input: mask[:T, :T], rope_cache[:T]",
                    ],
                )
    values["prefix_probe"] = f"prefixes of {', '.join(str(max(2, int(T * f))) for f in PREFIX_LENGTHS)} tokens agree"


def _unzero(model: nn.Module) -> list[str]:
    """Fill parameters that are all zero (a zero-initialised head or residual projection) with small
    noise: a fresh model whose logits ignore its input would hide any leak from both probes. The
    mask and the wiring are untouched; only this check's own fresh copy changes."""
    gen = torch.Generator().manual_seed(5)
    filled = []
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() > 1 and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen).to(p) * 0.02)
                filled.append(name)
    return filled


def _value_leak(model: nn.Module, x: torch.Tensor, V: int, cuts: list[int], seed: int) -> tuple[int | None, float]:
    """Change the tokens after each cut; the first prefix position whose logits moved, and the largest move."""
    T = x.shape[1]
    gen = torch.Generator().manual_seed(seed)
    first_leak, worst = None, 0.0
    with torch.no_grad():
        torch.manual_seed(0)  # same dropout masks for both passes (train mode, or dropout wrongly on in eval)
        base, _ = adapter.full_logits(model, x)
        for t in cuts:
            x2 = x.clone()
            x2[0, t + 1 :] = (x2[0, t + 1 :] + torch.randint(1, V, (T - t - 1,), generator=gen).to(x.device)) % V
            torch.manual_seed(0)
            other, _ = adapter.full_logits(model, x2)
            diff = (base[0, : t + 1] - other[0, : t + 1]).abs().amax(dim=-1)  # per prefix position
            worst = max(worst, diff.max().item())
            leaking = (diff > 1e-4 * (1 + base.abs().max())).nonzero().flatten()
            if len(leaking):
                pos = int(leaking[0].item())
                first_leak = pos if first_leak is None else min(first_leak, pos)
    return first_leak, worst


def _gradient_leak(model: nn.Module, emb: nn.Module, x: torch.Tensor, V: int) -> int | None:
    """d(logits at t) / d(embedding at s > t) must be zero; return the first t where it is not."""
    captured: dict[str, torch.Tensor] = {}

    def hook(_m, _inp, out):
        out.retain_grad()
        captured["emb"] = out

    handle = emb.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            torch.manual_seed(0)
            logits, _ = adapter.full_logits(model, x)
    finally:
        handle.remove()
    if "emb" not in captured or not captured["emb"].requires_grad:
        return None
    T = x.shape[1]
    probe = torch.randn(V, generator=torch.Generator().manual_seed(3)).to(logits.device)
    positions = sorted({0, T // 4, T // 2, T - 2}) if T > 2 else [0]
    for t in positions:
        if captured["emb"].grad is not None:
            captured["emb"].grad = None
        (logits[0, t] * probe).sum().backward(retain_graph=True)
        grad = captured["emb"].grad
        assert grad is not None  # backward reached the embedding output: retain_grad() was called
        g = grad[0, t + 1 :]
        if g.abs().max().item() > 0:
            return t
    return None


@check("eval_determinism", "model", "Two eval-mode passes agree (dropout off)", depends=("forward_shapes",))
def eval_determinism(ctx, run):
    B, T, _ = _shape_T(ctx)
    cfg = ctx.base_config()
    model = ctx.build_model().eval()
    x, _ = ctx.batch(B, T)
    with torch.no_grad():
        a, _ = adapter.full_logits(model, x)
        b, _ = adapter.full_logits(model, x)
    diff = (a - b).abs().max().item()
    values = {"max_difference": diff, "config_dropout": cfg.get("dropout")}
    if diff > 1e-6:
        raise Outcome(
            Status.FAIL,
            f"two eval-mode forward passes differ by {diff:.3g}: dropout is active in eval",
            values=values,
            causes=[
                "F.dropout(x, p) without training=self.training",
                "model.eval() never reached a submodule",
                "sampling or noise inside forward",
            ],
            fixes=["use nn.Dropout modules, or F.dropout(x, p, training=self.training)"],
        )
    return "eval-mode forward passes are identical", values
