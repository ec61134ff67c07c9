"""Checks on generation: the sampler settings and the repetition of what the model writes."""

from __future__ import annotations

from ..errors import SamplerSettingsError
from ..repetition import assess_repetition, repetition_report
from ..sampling import generate, unusual_settings, validate
from .registry import check
from .result import Outcome, Status


@check("sampler_settings", "generation", "Sampler settings are valid and sensible", depends=("tokenizer_roundtrip",))
def sampler_settings(ctx, run):
    s = ctx.options.sampler
    values = {
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "repetition_penalty": s.repetition_penalty,
        "max_new_tokens": s.max_new_tokens,
        "seed": s.seed,
    }
    try:
        notices = validate(s, ctx.tokenizer.vocab_size)
    except SamplerSettingsError as exc:
        raise Outcome(
            Status.FAIL,
            exc.message,
            values=values,
            causes=exc.causes or ["a setting outside its valid range"],
            fixes=["temperature >= 0 (0 = greedy), top-k >= 0, top-p in (0, 1], penalty > 0"],
        ) from None
    warnings = unusual_settings(s)
    values["notices"] = notices
    if warnings:
        raise Outcome(
            Status.WARN,
            "; ".join(warnings),
            values=values,
            causes=["settings valid but unusual for a character model"],
            fixes=["temperature 0.8, top-p 0.95, repetition penalty 1.0-1.1 are typical"],
        )
    return "valid" + (f" ({'; '.join(notices)})" if notices else ""), values


@check(
    "generation_repetition",
    "generation",
    "Generated text does not loop",
    depends=("sampler_settings", "tokenizer_roundtrip"),
)
def generation_repetition(ctx, run):
    tok, settings = ctx.tokenizer, ctx.options.sampler
    inspected = ctx.inspected_model(require_finite=True)
    model, source = inspected.model, inspected.label
    prompt = "".join(c for c in ctx.options.prompt if c in tok.stoi) or tok.chars[0]
    ids = tok.encode(prompt)
    new = generate(model, ids, settings)
    text = tok.decode(new)
    report = repetition_report(text)
    verdict = assess_repetition(text)
    reasons = list(verdict.reasons)
    status = {"pass": Status.PASS, "warn": Status.WARN, "fail": Status.FAIL}[verdict.status]
    if inspected.source == "fresh model":
        # an untrained model writes noise by design: high entropy is expected, and what it writes
        # says nothing about a training run, so a loop is at most a warning (a model that always
        # predicts one character shows it even untrained)
        reasons = [r for r in reasons if not r.startswith("char_entropy")]
        status = Status.WARN if reasons and status is not Status.PASS else Status.PASS
    values = {"model": source, "prompt": prompt, "text": text, **report, "verdict": status.value, "reasons": reasons}
    if status is not Status.PASS:
        loops = report["tail_period"] and report["tail_fraction"] > 0
        raise Outcome(
            status,
            ("output loops: " if loops else "degenerate output: ") + "; ".join(reasons[:2]) + f" [{source}]",
            values=values,
            causes=[
                "greedy decoding (temperature 0) on a small model",
                "an undertrained model",
                "repetition penalty below 1",
                "a model that sees the future in training but not when generating (see causal_independence)",
            ],
            fixes=["temperature 0.8 with top-p 0.95", "a mild repetition penalty (1.05-1.1)", "train longer"],
        )
    return (
        f"{report['chars']} chars, repetition rate {report['repetition_rate']:.2f}, "
        f"distinct-2 {report['distinct_2']:.2f} [{source}]"
    ), values
