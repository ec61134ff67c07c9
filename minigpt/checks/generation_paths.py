"""The paths generation calls a model by, held against the full sequence: a prompt shorter than the
context down to one token (`prefix_probe`), and decoding one token at a time through the model's
own cache where its protocol is known (`cache_probe`: Hugging Face's `past_key_values`/`cache`,
minigpt's `make_cache`). Each writes what it ran in `values` and raises the check's `Outcome`
on a mismatch; `causal_independence` runs both once no leak is found."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

from minigpt.checks import adapter
from minigpt.checks.result import Outcome, Status
from minigpt.model.contract import forward_plan

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


def prefix_probe(model: nn.Module, x: torch.Tensor, values: dict) -> None:
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


def cache_probe(model: nn.Module, x: torch.Tensor, values: dict) -> None:
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
