"""Checks on generation: the sampler settings and the repetition of what the model writes."""

from __future__ import annotations

from ..errors import SamplerSettingsError
from ..repetition import repetition_report
from ..sampling import generate, unusual_settings, validate
from .registry import check
from .result import Outcome, Status


@check("sampler_settings", "generation", "Sampler settings are valid and sensible")
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
    values = {"model": source, "prompt": prompt, "text": text, **report}
    looping = report["tail_fraction"] > 0.3 or report["repetition_rate"] > 0.6
    if looping and report["chars"] >= 40:
        raise Outcome(
            Status.WARN,
            f"output loops: repetition rate {report['repetition_rate']:.2f}, "
            f"repeating tail of period {report['tail_period']} covers {report['tail_fraction']:.0%} [{source}]",
            values=values,
            causes=[
                "greedy decoding (temperature 0) on a small model",
                "an undertrained model",
                "repetition penalty below 1",
            ],
            fixes=["temperature 0.8 with top-p 0.95", "a mild repetition penalty (1.05-1.1)", "train longer"],
        )
    return (
        f"{report['chars']} chars, repetition rate {report['repetition_rate']:.2f}, "
        f"distinct-2 {report['distinct_2']:.2f} [{source}]"
    ), values
