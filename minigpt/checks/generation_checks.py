"""Checks on generation: the sampler settings and the repetition of what the model writes."""

from __future__ import annotations

from minigpt.checks.batch_checks import block_size, model_vocab
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.errors import SamplerSettingsError
from minigpt.sample.generate import generate, unusual_settings, validate
from minigpt.sample.repetition import assess_repetition, repetition_report


@check("sampler_settings", "generation", "Sampler settings are valid and sensible", depends=("tokenizer_roundtrip",))
def sampler_settings(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    s = ctx.options.sampler
    values: dict[str, object] = {
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
def generation_repetition(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok, settings = ctx.tokenizer, ctx.options.sampler
    inspected = ctx.inspected_model(require_finite=True)
    model, source = inspected.model, inspected.label
    prompt = tok.encodable(ctx.options.prompt) or tok.decode([0])
    ids = tok.encode(prompt)
    # a vocabulary padded past the tokenizer: sample the IDs it can decode (a trained model gives
    # the padding rows almost nothing; a fresh one a share of its guess)
    padded = model_vocab(ctx) > tok.vocab_size
    # the shape of the config the model was built from: not every model keeps it in `model.config`
    new = generate(
        model,
        ids,
        settings,
        vocab_limit=tok.vocab_size if padded else None,
        block_size=block_size(ctx),
        vocab_size=model_vocab(ctx),
    )
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


YARDSTICK_CHARS = 500_000  # of the training text: its common characters and its words
REFERENCE_CHUNKS = 8  # windows of the validation text, each as long as a sample: what real text scores
CHAR_LEVEL, WORD_LEVEL = 0.85, 0.5  # of the data's own char_fit / word_fit
WORD_GAIN = 0.10  # a rise in word_fit that counts as more structure at the same level


@check(
    "sample_structure",
    "generation",
    "The run's samples grew more structured (characters, then words of the data)",
    depends=("token_range",),
)
def sample_structure(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    from minigpt.logs.samples import Structure, Yardstick, read_samples

    path = ctx.inputs.workspace / "logs" / "samples.jsonl"
    samples = read_samples(path)
    if not samples:
        raise Outcome(
            Status.SKIP,
            f"no samples at {path}: minigpt train writes one per evaluation; "
            "a watched loop does with minigpt.watch(..., tokenizer=PATH)",
        )
    if len(samples) < 2:
        raise Outcome(Status.SKIP, f"one sample so far (step {samples[0].step}): two are needed to compare")
    tok = ctx.tokenizer
    train = ctx.splits["train"]
    yard = Yardstick.of(tok.decode(train[:YARDSTICK_CHARS].tolist()))
    first, last = samples[0], samples[-1]
    size = max(1, len(last.text))
    held = ctx.splits["val"] if "val" in ctx.splits else train[-size * REFERENCE_CHUNKS :]
    refs = [yard.measure(tok.decode(held[i * size : (i + 1) * size].tolist())) for i in range(REFERENCE_CHUNKS)]
    refs = [r for r in refs if r.char_fit > 0] or [Structure(1.0, 1.0)]
    ref = Structure(sum(r.char_fit for r in refs) / len(refs), sum(r.word_fit for r in refs) / len(refs))
    m0, m1 = yard.measure(first.text), yard.measure(last.text)

    def level(m: Structure) -> int:  # 0 noise, 1 the data's characters, 2 the data's words
        if ref.word_fit > 0 and m.word_fit >= WORD_LEVEL * ref.word_fit:
            return 2
        return 1 if m.char_fit >= CHAR_LEVEL * ref.char_fit else 0

    names = ("noise", "the data's characters, not yet its words", "words of the data")
    story = (
        f"step {first.step} -> {last.step} ({len(samples)} samples): common characters "
        f"{m0.char_fit:.0%} -> {m1.char_fit:.0%} (the data's own text {ref.char_fit:.0%}), letters in real words "
        f"{m0.word_fit:.0%} -> {m1.word_fit:.0%} (its own {ref.word_fit:.0%})"
    )
    values = {
        "samples": len(samples),
        "first_step": first.step,
        "last_step": last.step,
        "first": {"char_fit": m0.char_fit, "word_fit": m0.word_fit, "text": first.text},
        "last": {"char_fit": m1.char_fit, "word_fit": m1.word_fit, "text": last.text},
        "data": {"char_fit": ref.char_fit, "word_fit": ref.word_fit},
        "level": names[level(m1)],
        "path": str(path),
    }
    loop = assess_repetition(last.text)
    if loop.status == "fail" and level(m1) < 2:
        raise Outcome(
            Status.WARN,
            f"the latest sample (step {last.step}) is degenerate: {'; '.join(loop.reasons[:1])}; {story}",
            values=values,
            causes=["a model that learned to repeat (targets equal to the inputs: see loop_targets_shifted)"],
            fixes=["run batch_shift and loop_targets_shifted", "look at the samples by step in the Loss pane"],
        )
    grew = level(m1) > level(m0) or (level(m1) == level(m0) and m1.word_fit - m0.word_fit >= WORD_GAIN)
    if level(m1) == 2 or grew:
        return f"samples reached {names[level(m1)]}: {story}", values
    raise Outcome(
        Status.WARN,
        f"samples did not grow more structured, still {names[level(m1)]}: {story}",
        values=values,
        causes=[
            "the weights barely changed (a learning rate far too low, parameters outside the optimizer)",
            "the run is too short for this model to write the data's characters",
            "generation sees another model or tokenizer than training",
            "targets equal to the inputs: the model learns to copy, not to predict (see batch_shift, "
            "loop_targets_shifted)",
        ],
        fixes=["run optimizer_update, loop_optimizer_covers and training_curve", "train longer"],
    )
