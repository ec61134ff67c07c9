"""Checks on what a model's outputs may depend on: position t never sees t+1 (in eval and train
mode, for prompts shorter than the context down to one token, and through the model's own cache
where it takes Hugging Face's), and two eval-mode passes agree (no dropout left on)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn

from minigpt.checks import adapter
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.generation_paths import cache_probe, prefix_probe
from minigpt.checks.locate import first_changed
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status, name_list
from minigpt.model.contract import token_embedding


@check("causal_independence", "model", "Position t never sees t+1, in eval and train mode", depends=("forward_shapes",))
def causal_independence(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    _, T, V = check_shape(ctx)
    judged = ctx.judged_model()  # the user's trained weights where there are any
    model = judged.model
    x, _ = ctx.batch(1, T)
    cuts = sorted({max(0, T // 4 - 1), T // 2 - 1, (3 * T) // 4 - 1})
    values: dict = {"cuts": cuts, "judged": judged.label}
    values["unzeroed_parameters"] = _unzero(model) if judged.source == "fresh model" else []
    leaks: dict[str, int] = {}  # mode -> first leaking position
    emb = token_embedding(model, V)
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
        prefix_probe(model, x, values)
        cache_probe(model, x, values)
    if leaks:
        only_train = set(leaks) == {"train"}
        where = " (in train mode only)" if only_train else ""
        model.train(only_train)
        located = _leak_origin(model, x, V, min(leaks.values()))
        model.eval()
        values["leak_enters_at"] = located
        measured = [f"measured: the leak enters at {located}"] if located else []
        raise Outcome(
            Status.FAIL,
            f"position {min(leaks.values())} changes when later tokens change{where}: the model sees the future "
            f"(on the {judged.label})" + (f"; it enters at {located}" if located else ""),
            values=values,
            causes=measured
            + (
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
        "no gradient to later inputs; "
        + (
            "cached decoding agrees with the full sequence"
            if str(values.get("cache_probe", "")).startswith("decoding")
            else "no cache of a known protocol: prompts down to one token agree"
        )
        + f" (on the {judged.label})",
        values,
    )


def _leak_origin(model: nn.Module, x: torch.Tensor, V: int, t: int) -> str | None:
    """Where the future first reaches position t (`locate.first_changed`), with only the tokens
    after t changed; the time axis is the second, or the last in a (B, C, T) layout (a Conv1d, a
    BatchNorm1d)."""
    T = x.shape[1]
    changed = x.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % V

    def prefix(out: torch.Tensor) -> torch.Tensor | None:
        if out.dim() < 2 or out.shape[0] != 1:
            return None
        axis = 1 if out.shape[1] == T else out.dim() - 1 if out.shape[-1] == T else None
        return None if axis is None else out.narrow(axis, 0, t + 1)

    return first_changed(model, x, changed, prefix)


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

    def hook(_m: nn.Module, _inp: tuple[object, ...], out: torch.Tensor) -> torch.Tensor:
        if out.requires_grad:
            out.retain_grad()
        else:  # a frozen embedding: what the logits depend on is measured all the same
            out = out.detach().requires_grad_(True)
        captured["emb"] = out
        return out

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
        assert grad is not None  # backward reached the embedding output: it keeps its grad
        g = grad[0, t + 1 :]
        if g.abs().max().item() > 0:
            return t
    return None


@check("eval_determinism", "model", "Two eval-mode passes agree (dropout off)", depends=("forward_shapes",))
def eval_determinism(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    cfg = ctx.base_config()
    judged = ctx.judged_model()  # the user's trained weights where there are any
    model = judged.model.eval()
    x, _ = ctx.batch(B, T)
    left_training = [name or "the model" for name, m in model.named_modules() if m.training]
    before = _call_state(model)
    with torch.no_grad():
        a, _ = adapter.full_logits(model, x)
        changed = _changed(before, _call_state(model))
        b, _ = adapter.full_logits(model, x)
    diff = (a - b).abs().max().item()
    values: dict[str, Any] = {"max_difference": diff, "config_dropout": cfg.get("dropout"), "judged": judged.label}
    if diff <= 1e-6:
        return f"eval-mode forward passes are identical (on the {judged.label})", values
    # what differs between the calls, measured: modes, state a call changes, random draws
    with torch.no_grad():
        torch.manual_seed(0)
        c, _ = adapter.full_logits(model, x)
        torch.manual_seed(0)
        d, _ = adapter.full_logits(model, x)
    seeded_agree = (c - d).abs().max().item() <= 1e-6
    values.update(
        modules_in_training_mode=left_training, state_changed_by_a_call=changed, agree_with_the_seed_reset=seeded_agree
    )
    causes, short = [], []
    if left_training:
        causes.append(
            f"measured: {name_list(left_training)} still in training mode after model.eval(): an eval() or train() "
            "override that does not reach them, or a forward that sets self.training"
        )
        short.append("modules left in training mode")
    if changed:
        causes.append(
            f"measured: one forward pass changed {name_list(changed)}: state kept between calls (a running "
            "statistic, a counter, a cache left on), so the next call computes something else"
        )
        short.append(f"a call changes {changed[0]}")
    if seeded_agree and not changed:
        causes.append(
            "measured: with the random seed reset before each pass they agree: random draws in eval mode "
            "(F.dropout(x, p) without training=self.training, or noise added in forward)"
        )
        short.append("dropout or noise is active in eval")
    if not causes:
        causes.append(
            "cause not determined: no module in training mode, no buffer or attribute changed by a call, and "
            "the passes differ with the seed reset too (a non-deterministic kernel?)"
        )
        short.append("cause not determined")
    raise Outcome(
        Status.FAIL,
        f"two eval-mode forward passes differ by {diff:.3g}: {'; '.join(short)} (on the {judged.label})",
        values=values,
        causes=causes,
        fixes=[
            "use nn.Dropout modules, or F.dropout(x, p, training=self.training)",
            "keep per-call state out of forward, or reset it (register it as a buffer only if it is a constant)",
        ],
    )


def _call_state(model: nn.Module) -> dict[str, object]:
    """What a forward pass could change: every buffer and plain tensor attribute (copied), and every
    number or flag a module keeps as an attribute, by `module.name`."""
    state: dict[str, object] = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for name, buf in module.named_buffers(recurse=False):
            state[prefix + name] = buf.detach().clone()
        for name, value in vars(module).items():
            if name.startswith("_") or name == "training":
                continue
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                state[prefix + name] = value.detach().clone()
            elif isinstance(value, (bool, int, float)):
                state[prefix + name] = value
    return state


def _changed(before: dict[str, object], after: dict[str, object]) -> list[str]:
    out = []
    for name, old in before.items():
        new = after.get(name)
        if isinstance(old, torch.Tensor):
            same = isinstance(new, torch.Tensor) and old.shape == new.shape and torch.equal(old, new)
        else:
            same = old == new
        if not same:
            out.append(name)
    return out + [name for name in after if name not in before]
