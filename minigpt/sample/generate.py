"""Sampler settings, next-token filters, autoregressive generation, and the fixed sample a training
run draws at each evaluation (`draw_sample`).

Filters are applied to the last position's logits in this order:

1. repetition penalty (Hugging Face semantics): every *distinct* token in the context window
   has its logit divided by the penalty when positive and multiplied by it when negative;
2. temperature: logits / temperature; temperature 0 is greedy, keeping only the argmax of the
   penalised logits;
3. top-k: keep the k largest logits (0 or None is off; k above the vocabulary is clamped);
4. top-p (nucleus): in float32, keep the smallest set of most likely tokens whose probability
   reaches top_p, *including* the token that crosses it; always at least one token.

Each stage is a pure function on a 1-D `[V]` or batched `[B, V]` logits tensor; removed tokens
get -inf. `filter_stages` runs them on one position and reports the distribution after each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.data.tokenizer import CharTokenizer
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.errors import SamplerSettingsError
from minigpt.model.contract import ModelContractError, config_value, unpack
from minigpt.model.gpt import MiniGPT
from minigpt.sample.settings import (  # noqa: F401  (re-exported)
    SAMPLE_PROMPT,
    SAMPLE_SETTINGS,
    SamplerSettings,
    unusual_settings,
    validate,
)
from minigpt.sample.values import is_greedy

# Mass already kept within float32 rounding of top_p counts as having reached it, so that
# probabilities [0.5, 0.3, 0.2] with top_p=0.5 keep exactly one token whatever the rounding.
_TOP_P_TOLERANCE = 1e-6


@dataclass
class Stage:
    name: str  # "model", "repetition penalty", "temperature", "top-k", "top-p"
    probs: torch.Tensor  # float32 probabilities over the vocabulary, shape (V,)
    survivors: int  # tokens with non-zero probability after this stage


def _as_context(context_ids: Sequence[int] | torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    ids = torch.as_tensor(context_ids, dtype=torch.long, device=logits.device)
    return ids.reshape(1, -1) if ids.dim() == 1 else ids


def apply_repetition_penalty(
    logits: torch.Tensor, context_ids: Sequence[int] | torch.Tensor, penalty: float
) -> torch.Tensor:
    """HF penalty on each distinct token of `context_ids` (`[T]`, or `[B, T]` for `[B, V]` logits)."""
    if penalty == 1.0 or len(context_ids) == 0:
        return logits
    squeeze = logits.dim() == 1
    scores = logits.unsqueeze(0) if squeeze else logits
    ids = _as_context(context_ids, scores).expand(scores.shape[0], -1)
    picked = torch.gather(scores, 1, ids)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    # scatter writes the same value for a repeated id, so each distinct token is penalised once
    out = scores.scatter(1, ids, picked)
    return out.squeeze(0) if squeeze else out


def apply_temperature(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Scale by 1/temperature; temperature 0 (or one too small to divide by) keeps only the argmax (greedy)."""
    if is_greedy(temperature):
        keep = logits.argmax(dim=-1, keepdim=True)
        return torch.full_like(logits, float("-inf")).scatter(-1, keep, logits.gather(-1, keep))
    return logits if temperature == 1.0 else logits / temperature


def apply_top_k(logits: torch.Tensor, top_k: int | None) -> torch.Tensor:
    """Keep exactly the k largest logits (ties broken by torch.topk); 0/None or k >= V is off."""
    if not top_k or top_k >= logits.shape[-1]:
        return logits
    values, indices = torch.topk(logits, top_k, dim=-1)
    return torch.full_like(logits, float("-inf")).scatter(-1, indices, values)


def apply_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Nucleus filter: keep the most likely tokens until their mass reaches top_p, crossing token included."""
    if top_p >= 1.0:
        return logits
    probs = F.softmax(logits.float(), dim=-1)  # float32 even for half-precision logits
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    drop_sorted = mass_before >= top_p - _TOP_P_TOLERANCE
    drop_sorted[..., 0] = False  # always keep the most likely token
    drop = drop_sorted.scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def filter_logits(
    logits: torch.Tensor, context_ids: Sequence[int] | torch.Tensor, settings: SamplerSettings
) -> torch.Tensor:
    """All four stages in the documented order."""
    logits = apply_repetition_penalty(logits, context_ids, settings.repetition_penalty)
    logits = apply_temperature(logits, settings.temperature)
    logits = apply_top_k(logits, settings.top_k)
    return apply_top_p(logits, settings.top_p)


def filter_stages(
    logits_1d: torch.Tensor, context_ids: Sequence[int] | torch.Tensor, settings: SamplerSettings
) -> list[Stage]:
    """The next-token distribution before any filter ("model") and after each stage."""
    validate(settings, logits_1d.shape[-1])
    steps: list[tuple[str, Callable[[torch.Tensor], torch.Tensor]]] = [
        ("model", lambda x: x),
        ("repetition penalty", lambda x: apply_repetition_penalty(x, context_ids, settings.repetition_penalty)),
        ("temperature", lambda x: apply_temperature(x, settings.temperature)),
        ("top-k", lambda x: apply_top_k(x, settings.top_k)),
        ("top-p", lambda x: apply_top_p(x, settings.top_p)),
    ]
    stages, logits = [], logits_1d.detach()
    for name, fn in steps:
        logits = fn(logits)
        probs = F.softmax(logits.float(), dim=-1)
        stages.append(Stage(name, probs, int((probs > 0).sum().item())))
    return stages


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Encode before generating, so missing characters are reported up front (UnknownCharactersError)."""
    if not prompt:
        raise SamplerSettingsError(
            "empty prompt: generation needs at least one character to condition on",
            causes=["pass --prompt with text drawn from the training corpus, e.g. a newline"],
        )
    return tokenizer.encode(prompt)


def _model_device(model: nn.Module) -> torch.device:
    param = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    return param.device if param is not None else torch.device("cpu")


# no_grad, not inference_mode: a model that builds a buffer lazily in its forward (a rotary cache)
# would keep an inference tensor that its next training step cannot save for backward, and the
# watch samples from the user's model in the middle of their run
@torch.no_grad()
def generate(
    model: nn.Module,
    ids: Sequence[int],
    settings: SamplerSettings,
    *,
    on_token: Callable[[int], bool | None] | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    vocab_limit: int | None = None,
    block_size: int | None = None,
    vocab_size: int | None = None,
) -> list[int]:
    """Sample up to `settings.max_new_tokens` tokens after `ids`; returns the new tokens only.

    The model sees at most its last `block_size` tokens and only the last position's logits are
    used, so models returning `[B, 1, V]` work too. With a KV cache the prompt is prefilled and
    each step feeds one token. Positions are absolute, so a full cache cannot slide: past
    `block_size` we drop it and recompute over the last `block_size` tokens each step, which keeps
    the output identical to full recomputation. `on_token(token_id)` is called per token;
    returning False stops generation early (that token is still included). `vocab_limit` keeps
    sampling to the IDs a tokenizer can decode when the model's vocabulary is padded past it.
    `block_size` and `vocab_size` default to the model's `config`; a model that keeps its
    hyperparameters elsewhere (or nowhere) is given them by the caller.
    """
    validate(settings, vocab_size or config_value(model, "vocab_size"))
    if len(ids) == 0:
        raise SamplerSettingsError("empty prompt: generation needs at least one token to condition on")
    block_size = block_size or config_value(model, "block_size")
    device = _model_device(model)
    if generator is None and settings.seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(settings.seed)
    tokens, new = list(ids), []
    # only a model that says it supports the cache (our MiniGPT) is asked for one
    cache = cast(MiniGPT, model).make_cache(1) if use_cache and getattr(model, "supports_kv_cache", False) else None
    was_training = model.training
    model.eval()
    try:
        for _ in range(settings.max_new_tokens):
            if cache is not None and len(tokens) > block_size:
                cache = None  # cache full: recompute over the window from now on
            if cache is None:
                x, kwargs = tokens[-block_size:], {}
            else:
                x, kwargs = tokens[cache.length :], {"cache": cache}  # prefill, then one token
            out = model(torch.tensor([x], dtype=torch.long, device=device), **kwargs)
            logits = unpack(out)[0]
            if logits.dim() != 3:
                raise ModelContractError(
                    f"forward(idx) returned logits of shape {list(logits.shape)}; generation needs (B, T, V)"
                )
            logits = logits[0, -1, :]  # (V,): tuple, bare logits, dict or .logits
            if vocab_limit is not None:
                logits = logits[:vocab_limit]  # rows of a padded vocabulary are never sampled
            logits = filter_logits(logits, tokens[-block_size:], settings)
            if is_greedy(settings.temperature):
                token = int(logits.argmax().item())  # greedy: no randomness consumed
            else:
                probs = F.softmax(logits.float(), dim=-1)
                token = int(torch.multinomial(probs, 1, generator=generator).item())
            tokens.append(token)
            new.append(token)
            if on_token is not None and on_token(token) is False:
                break
    finally:
        model.train(was_training)
    return new


def sample_prompt(stoi: Iterable[str]) -> str:
    """The fixed prompt, restricted to characters the tokenizer has (its first character if none)."""
    known = set(stoi)
    prompt = "".join(c for c in SAMPLE_PROMPT if c in known)
    return prompt or next(iter(sorted(known)), "")


def draw_sample(model: nn.Module, tokenizer: CharTokenizer) -> tuple[str, str]:
    """The training log's sample (`minigpt.logs.samples`): (prompt, text), with `text` the
    `SAMPLE_SETTINGS.max_new_tokens` characters after the fixed prompt. Its own seeded generator:
    the caller's random state is untouched, and the model is left in the mode it was found in."""
    prompt = sample_prompt(tokenizer.stoi)
    new = generate(model, tokenizer.encode(prompt), SAMPLE_SETTINGS)
    return prompt, tokenizer.decode(new)
