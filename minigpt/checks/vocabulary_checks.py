"""The tokenizer's vocabulary: text encodes and decodes back unchanged, and it is the vocabulary the
checkpoint's model was trained on (whether the token files were written by it: `tokenizer_checks`)."""

from __future__ import annotations

from typing import Any

import torch

from minigpt.checks.adapter import full_logits
from minigpt.checks.batch_checks import DEBUG_BATCH_SIZE, block_size
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.errors import MiniGPTError

SAMPLE_TEXT = "Hello, world!\nThe quick brown fox jumps over the lazy dog. 0123456789"


@check("tokenizer_roundtrip", "tokenizer", "decode(encode(text)) == text", depends=("files",))
def tokenizer_roundtrip(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok = ctx.tokenizer
    first, last = range(min(10, tok.vocab_size)), range(max(0, tok.vocab_size - 10), tok.vocab_size)
    values: dict[str, Any] = {
        "kind": tok.kind,
        "tokenizer": tok.name,
        "vocab_size": tok.vocab_size,
        "fingerprint": tok.fingerprint,
        "lossless": tok.lossless,
        "special_tokens": dict(sorted(tok.special_tokens.items(), key=lambda kv: kv[1])[:12]),
        "eot_id": tok.eot_id,
        "bos_id": tok.bos_id,
        "first_tokens": [tok.token_label(i) for i in first],
        "last_tokens": [tok.token_label(i) for i in last],
    }
    if tok.kind == "char":  # characters as Python writes them, as the files show them
        values["first_chars"] = [repr(raw_token(tok, i)) for i in first]
        values["last_chars"] = [repr(raw_token(tok, i)) for i in last]
    # a character vocabulary is asked only about the characters it has
    sample = tok.encodable(SAMPLE_TEXT) or tok.decode(range(min(20, tok.vocab_size)))
    ids = tok.encode(sample)
    back = tok.decode(ids)
    values.update(sample=sample, sample_tokens=len(ids), decoded=back)
    if back != sample and tok.lossless:
        raise Outcome(
            Status.FAIL,
            f"{len(sample)} characters of sample text come back changed from encode/decode: "
            f"{_first_difference(sample, back)}",
            values=values,
            causes=[
                "the vocabulary maps two IDs to one character (duplicates)",
                "a custom decode/encode that is not inverse",
            ],
            fixes=["rebuild the tokenizer with `minigpt prepare --force`", "use the tokenizer file saved with the run"],
        )
    kind = "" if tok.kind == "char" else f"{tok.kind} "
    per = f", {len(sample) / max(1, len(ids)):.1f} characters per token" if tok.kind != "char" else ""
    if back != sample:
        # a normalising tokenizer (SentencePiece, lower-casing) changes text by design: shown, not failed
        values["normalised"] = True
        return f"{kind}vocab {tok.vocab_size:,}: normalises text, {_first_difference(sample, back)}{per}", values
    return f"round trip exact on sample text; {kind}vocab {tok.vocab_size:,}{per}", values


def _first_difference(a: str, b: str) -> str:
    """Where two texts first differ, in a few characters of context: "'Hello  w' -> 'Hello w'"."""
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    lo = max(0, at - 6)
    return f"{a[lo : at + 6]!r} -> {b[lo : at + 6]!r}"


@check("tokenizer_fingerprint", "tokenizer", "Tokenizer matches the checkpoint", depends=("tokenizer_roundtrip",))
def tokenizer_fingerprint(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok = ctx.tokenizer
    if not ctx.has_checkpoint:
        raise Outcome(Status.SKIP, "no checkpoint to compare against (fresh model)")
    raw = ctx.checkpoint_raw
    saved = raw.get("tokenizer_fingerprint")
    model_vocab = raw["config"].get("vocab_size")
    values = {
        "tokenizer_fingerprint": tok.fingerprint,
        "checkpoint_fingerprint": saved,
        "tokenizer_vocab_size": tok.vocab_size,
        "model_vocab_size": model_vocab,
    }
    causes = [
        "`minigpt prepare` was re-run (perhaps with --force) after training",
        "the checkpoint comes from another workspace or corpus",
    ]
    padded = ""
    if isinstance(model_vocab, int) and model_vocab > tok.vocab_size and saved in (None, tok.fingerprint):
        # a vocabulary padded past the tokenizer, or a tokenizer smaller than the one the run used:
        # a model trained on IDs it was given puts less than a uniform share on rows never targeted
        mass = _padded_rows_mass(ctx, tok.vocab_size)
        share = (model_vocab - tok.vocab_size) / model_vocab
        values.update(padded_rows=model_vocab - tok.vocab_size, padded_rows_probability=mass, uniform_share=share)
        if mass is not None and mass > share:
            raise Outcome(
                Status.FAIL,
                f"the checkpoint's model gives IDs {tok.vocab_size}..{model_vocab - 1}, which this tokenizer never "
                f"produces, {mass:.1%} of its probability (a uniform guess: {share:.1%}): it was trained with a "
                "larger vocabulary",
                causes=causes + ["the tokenizer file of another run with fewer characters"],
                fixes=["use the tokenizer file saved with this run"],
                values=values,
            )
        held = f"; they hold {mass:.2%} of the probability" if mass is not None else ""
        padded = f"; model vocab_size {model_vocab} pads it by {model_vocab - tok.vocab_size} rows{held}"
    elif model_vocab is not None and model_vocab != tok.vocab_size:
        raise Outcome(
            Status.FAIL,
            f"tokenizer has {tok.vocab_size} characters, model vocab_size is {model_vocab}",
            causes=causes,
            fixes=["use the tokenizer file saved with this run"],
            values=values,
        )
    if saved is None:
        raise Outcome(
            Status.WARN,
            "checkpoint has no tokenizer_fingerprint; vocab sizes match (necessary, not sufficient)" + padded,
            causes=["the training script does not save the fingerprint"],
            fixes=["save tokenizer_fingerprint in checkpoints"],
            values=values,
        )
    if saved != tok.fingerprint:
        raise Outcome(
            Status.FAIL,
            f"fingerprint {tok.fingerprint[:12]} != checkpoint's {str(saved)[:12]} "
            "(same size, different characters or order)",
            causes=causes,
            fixes=["use the tokenizer file saved with this run"],
            values=values,
        )
    return f"fingerprint {saved[:12]} matches; vocab {tok.vocab_size}{padded}", values


def _padded_rows_mass(ctx: CheckContext, tokens: int) -> float | None:
    """The checkpoint model's mean probability on the output rows past the tokenizer, on real text."""
    try:
        model = ctx.checkpoint.model.eval()
    except MiniGPTError:
        return None
    x, _ = ctx.batch(DEBUG_BATCH_SIZE, block_size(ctx))
    with torch.no_grad():
        logits, _ = full_logits(model, x)
    if logits.size(-1) <= tokens:
        return None
    return logits.float().softmax(-1)[..., tokens:].sum(-1).mean().item()


def raw_token(tok: Tokenizer, i: int) -> str:
    """A token's text as it is (a character tokenizer's character), for values and messages."""
    return tok.token_bytes(i).decode("utf-8", errors="replace")
