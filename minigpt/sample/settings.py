"""Sampler settings and their validation: plain data, no torch, so the UI and the check registry
can read the defaults and validate typed values without loading torch (`minigpt.sample.generate` runs them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from minigpt.errors import SamplerSettingsError
from minigpt.sample.values import (
    GREEDY_TEMPERATURE_BELOW,
    REPETITION_PENALTY_MAX,
    REPETITION_PENALTY_MIN,
    is_greedy,
    seed_problem,
)


@dataclass
class SamplerSettings:
    temperature: float = 1.0  # 0 = greedy (argmax), and so is anything below 1e-30; must be >= 0
    top_k: int | None = None  # keep the k most likely tokens; 0/None = off
    top_p: float = 1.0  # nucleus mass in (0, 1]; 1 = off
    repetition_penalty: float = 1.0  # in [1e-6, 1e6]; 1 = off, > 1 discourages tokens already in context
    max_new_tokens: int = 200  # tokens to generate
    seed: int | None = None  # seeds a torch.Generator for reproducible sampling


# The sample a training run draws at each evaluation (`logs/samples.jsonl`, `minigpt.logs.samples`;
# drawn by `minigpt.sample.generate.draw_sample`): one fixed prompt, temperature and seed, so the
# samples of a run differ only by its weights.
SAMPLE_PROMPT = "The "
SAMPLE_SETTINGS = SamplerSettings(temperature=0.8, max_new_tokens=160, seed=0)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate(settings: SamplerSettings, vocab_size: int) -> list[str]:
    """Raise SamplerSettingsError for invalid values; return notices for adjusted ones."""
    s, notices = settings, []
    if not _is_number(s.temperature) or not math.isfinite(s.temperature) or s.temperature < 0:
        raise SamplerSettingsError(
            f"temperature must be a finite number >= 0 (0 means greedy); found {s.temperature!r}"
        )
    if s.top_k is not None:
        if not _is_int(s.top_k) or s.top_k < 0:
            raise SamplerSettingsError(f"top_k must be an integer >= 0 (0 or None is off); found {s.top_k!r}")
        if s.top_k > vocab_size:
            notices.append(f"top_k {s.top_k} is above the vocabulary size {vocab_size}; using {vocab_size} (off)")
    if not _is_number(s.top_p) or not math.isfinite(s.top_p) or not 0 < s.top_p <= 1:
        raise SamplerSettingsError(f"top_p must be in (0, 1] (1 is off); found {s.top_p!r}")
    if 0 < s.temperature and is_greedy(s.temperature):
        notices.append(
            f"temperature {s.temperature!r} is below {GREEDY_TEMPERATURE_BELOW:g}, too small to divide logits by: "
            "sampling as at temperature 0 (greedy)"
        )
    penalty = s.repetition_penalty
    if not _is_number(penalty) or not REPETITION_PENALTY_MIN <= penalty <= REPETITION_PENALTY_MAX:
        raise SamplerSettingsError(
            f"repetition_penalty must be in [{REPETITION_PENALTY_MIN:g}, {REPETITION_PENALTY_MAX:g}] (1.0 is off; "
            f"beyond, logits overflow); found {penalty!r}"
        )
    if not _is_int(s.max_new_tokens) or s.max_new_tokens < 0:
        raise SamplerSettingsError(f"max_new_tokens must be an integer >= 0; found {s.max_new_tokens!r}")
    problem = None if s.seed is None else seed_problem(s.seed)
    if problem:
        raise SamplerSettingsError(f"seed must be None or {problem}")
    return notices


def unusual_settings(settings: SamplerSettings) -> list[str]:
    """Warnings for valid settings that usually give bad samples (call after `validate`)."""
    s, warnings = settings, []
    if s.repetition_penalty > 1.3:
        warnings.append(
            f"repetition_penalty {s.repetition_penalty} > 1.3: on a character model nearly every letter is "
            "already in the context, so a strong penalty wrecks spelling"
        )
    elif s.repetition_penalty < 1.0:
        warnings.append(f"repetition_penalty {s.repetition_penalty} < 1.0 rewards repeats and invites loops")
    if s.temperature > 2.0:
        warnings.append(f"temperature {s.temperature} > 2 flattens the distribution towards random characters")
    if s.top_p < 0.5:
        warnings.append(f"top_p {s.top_p} < 0.5 keeps very few tokens; output tends to be repetitive")
    if s.top_k == 1:
        warnings.append("top_k 1 is the same as greedy decoding (temperature 0)")
    if s.temperature == 0 and ((s.top_k or 0) > 1 or s.top_p < 1):
        warnings.append("temperature 0 is greedy: top_k and top_p have no effect")
    if s.max_new_tokens == 0:
        warnings.append("max_new_tokens is 0: nothing will be generated")
    return warnings
