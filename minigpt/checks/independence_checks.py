"""Checks on what a model's outputs may depend on: position t never sees t+1 (in eval and train
mode, for prompts shorter than the context down to one token, and through the model's own cache
where it takes Hugging Face's), and two eval-mode passes agree (no dropout left on)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from minigpt.checks import adapter
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.locate import first_changed
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status, name_list
from minigpt.model.contract import forward_plan, token_embedding


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
        _prefix_probe(model, x, values)
        _cache_probe(model, x, values)
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


PREFIX_LENGTHS = (0.25, 0.5)  # prompts shorter than the context, as fractions of T, after a single token


def _prefix_lengths(T: int) -> list[int]:
    """One token (a one-token prompt, and every step of decoding with a cache), then the fractions."""
    return sorted({1, *(max(2, int(T * frac)) for frac in PREFIX_LENGTHS)} - {T})


def _steady_logits(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, float] | None:
    """The full sequence's logits and the tolerance a comparison with them allows, or None where two
    eval-mode passes already differ by more (noise there would read as a mismatch)."""
    full, _ = adapter.full_logits(model, x)
    scale = 1e-4 * (1 + full.abs().max().item())
    again, _ = adapter.full_logits(model, x)
    return None if (again - full).abs().max().item() > scale else (full, scale)


def _prefix_probe(model: nn.Module, x: torch.Tensor, values: dict) -> None:
    """A prompt shorter than the context must be embedded as it was in training: the logits of a
    prefix alone, a single token included, equal the logits at the same positions inside the longer
    sequence (a causal model's position t sees tokens 0..t only). Positions counted from the end (`pos[-T:]`), an
    offset computed from the length, or a mask sized for the full context break it at every
    length but the training one."""
    T = x.shape[1]
    with torch.no_grad():
        steady = _steady_logits(model, x)
        if steady is None:
            values["prefix_probe"] = "not run: two eval-mode passes differ (see eval_determinism)"
            return
        full, scale = steady
        for t in _prefix_lengths(T):
            try:
                alone, _ = adapter.full_logits(model, x[:, :t])
                if tuple(alone.shape[:2]) != (1, t) or alone.dim() != 3:
                    raise ValueError(f"logits of shape {list(alone.shape)}, expected [1, {t}, V]")
            except (RuntimeError, ValueError, IndexError, AssertionError) as exc:
                if t == 1:  # generation calls forward this way: a one-token prompt, each cached step
                    values["prefix_probe"] = f"forward on 1 token: {type(exc).__name__}: {exc}"[:300]
                    raise Outcome(
                        Status.FAIL,
                        f"forward on a single token fails: {type(exc).__name__}: {str(exc)[:160]}",
                        values=values,
                        causes=[
                            "measured: the same forward works on the full sequence; generation from a one-token "
                            "prompt, and each step of cached decoding, calls it on one token"
                        ],
                        fixes=[
                            "make forward work for any T from 1 to the context: slice masks and tables to T, "
                            "squeeze(dim) only the dimension meant"
                        ],
                    ) from None
                values["prefix_probe"] = f"not run: forward on {t} tokens: {type(exc).__name__}: {exc}"[:300]
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
    values["prefix_probe"] = f"prefixes of {', '.join(map(str, _prefix_lengths(T)))} tokens agree"


CACHE_WORDS = ("cache", "past", "kv", "state")  # a forward parameter by one of these names holds a cache
HF_CACHE_ARGS = ("past_key_values", "cache")


def _cache_probe(model: nn.Module, x: torch.Tensor, values: dict) -> None:
    """Decoding with the model's own cache must give the logits the full sequence gives at each
    position: generation samples through that path. Run for a Hugging Face forward, whose cache is
    `past_key_values` or `cache`, and for minigpt's own (`make_cache`, `forward(idx, cache=)`):
    half the sequence as the prompt, then one token at a time. A forward with a cache argument of
    another protocol, or none, is said to be tested on prefixes alone."""
    decode, how = _cached_decoder(model, x.device)
    if decode is None:
        values["cache_probe"] = how
        return
    T = x.shape[1]
    start = max(1, T // 2)
    with torch.no_grad():
        steady = _steady_logits(model, x)
        if steady is None:
            values["cache_probe"] = "not run: two eval-mode passes differ (see eval_determinism)"
            return
        full, scale = steady
        try:
            state = decode(x[:, :start], None)[1]
        except Exception as exc:  # a protocol that wants more than the cache (positions, a step count)
            values["cache_probe"] = f"not run: a forward with {how} raised {type(exc).__name__}: {exc}"[:300]
            return
        if state is None:
            values["cache_probe"] = f"not run: {how} returned no cache"
            return
        worst = 0.0
        for i in range(start, T):
            try:
                last, state = decode(x[:, i : i + 1], state)
            except Exception as exc:
                values["cache_probe"] = f"not run: decoding one token with {how} raised {type(exc).__name__}: {exc}"[
                    :300
                ]
                return
            diff = (last - full[0, i]).abs().max().item()
            worst = max(worst, diff)
            if diff > scale:
                values.update(cache_first_mismatch=i, cache_max_change=diff)
                raise Outcome(
                    Status.FAIL,
                    f"decoding with the model's own cache ({how}) gives other logits than the full sequence at "
                    f"position {i} (max change {diff:.3g}; a {start}-token prompt, then one token at a time): "
                    "generation samples from another model than the one training scored",
                    values=values,
                    causes=[
                        "measured: the full sequence and every prefix agree, the cached path does not; cause not "
                        "determined beyond that: positions restarted for each new token (position_ids not "
                        "advanced past the cache), a cache that drops or repeats a step, or a mask sized without it"
                    ],
                    fixes=["let the model derive positions from the cache (pass no position_ids), or offset them"],
                )
    values["cache_probe"] = (
        f"decoding with its own cache ({how}) from a {start}-token prompt agrees with the full sequence "
        f"(max change {worst:.1e})"
    )


Decode = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any]]


def _cached_decoder(model: nn.Module, device: torch.device) -> tuple[Decode | None, str]:
    """`decode(tokens, state) -> (last position's logits, state)` through the model's own cache, and
    how it is called; or None and why not."""
    cls = type(model)
    arg = _hf_cache_arg(cls) if forward_plan(cls).style == "hf" else None
    if arg is not None:

        def hf(tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
            out = model(input_ids=tokens, use_cache=True, **({arg: state} if state is not None else {}))
            return out.logits[0, -1], _returned_cache(out)

        return hf, f"{arg}="
    if getattr(model, "supports_kv_cache", False) and callable(getattr(model, "make_cache", None)):

        def own(tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]:
            state = state if state is not None else model.make_cache(1, device)  # type: ignore[operator]
            logits, _ = adapter.unpack(model(tokens, cache=state))
            return logits[0, -1], state

        return own, "make_cache() and forward(idx, cache=)"
    other = [n for n in _forward_names(cls)[1:] if any(w in n.lower() for w in CACHE_WORDS)]
    if other:
        return (
            None,
            f"not run: forward's {other[0]!r} is a cache of a protocol the checks do not know; "
            "tested on prefixes alone",
        )
    return None, "not run: forward takes no cache; tested on prefixes alone (its generation path)"


def _forward_names(cls: type) -> list[str]:
    try:
        return list(inspect.signature(cls.forward).parameters)  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return []


def _hf_cache_arg(cls: type) -> str | None:
    """The keyword a Hugging Face forward takes its cache by: `past_key_values`, or `cache` in newer
    transformers; for a subclass whose forward passes **kwargs on, the one its base's forward names."""
    for klass in cls.__mro__:
        names = _forward_names(klass)
        found = next((n for n in HF_CACHE_ARGS if n in names), None)
        if found is not None:
            return found
        if "kwargs" not in names:
            return None  # a forward that takes no cache and does not pass one on
    return None


def _returned_cache(out: object) -> object:
    return next((c for c in (getattr(out, n, None) for n in HF_CACHE_ARGS) if c is not None), None)


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
