"""How well a tokenizer reads stored token IDs: the measurement `token_files_tokenizer` judges and
`import nanogpt` refuses a mismatched run by. The tokenizer that wrote the IDs decodes them to text
and re-encodes that text to nearly the same IDs; another tokenizer does not."""

from __future__ import annotations

from typing import Any

import torch

from minigpt.data.tokenizer_api import Tokenizer, not_text

WINDOWS = 48  # stretches of the train split decoded and re-encoded
WINDOW = 64  # IDs in each, about: each starts and ends at a word (a token that begins with a space)
STABLE = 0.9  # stretches that re-encode to the same IDs: the tokenizer that wrote them scores ~0.98
# IDs beyond the vocabulary say "another tokenizer" only in numbers: a few stray ones are a
# corrupt file or an off-by-one (token_range names those), not a whole vocabulary's mismatch
BEYOND_FOREIGN = 0.01
FOREIGN = 0.6  # below this the files were written by another tokenizer (another BPE scores ~0.3)
GPT2_EOT = 50256
BYTE_IDS = 256  # a byte-level vocabulary's single bytes (and most character vocabularies)
NOT_TEXT_SHARE = 0.01  # replacement or control characters in decoded text


def _word_start(tok: Tokenizer, token: int) -> bool:
    return tok.token_bytes(token)[:1] in (b" ", b"\n")


def stretches(tok: Tokenizer, ids: torch.Tensor) -> list[list[int]]:
    """Evenly spaced stretches of about WINDOW IDs, cut at word starts and before any special or
    out-of-range ID: cut there, a tokenizer's own IDs decode and re-encode to themselves (a cut
    inside a word, or SentencePiece's leading space, would change the first token)."""
    n, vocab = ids.numel(), tok.vocab_size
    specials = set(tok.special_tokens.values())
    out = []
    for s in dict.fromkeys(torch.linspace(0, max(0, n - 4 * WINDOW), WINDOWS).long().tolist()):
        chunk = ids[s : s + 4 * WINDOW].tolist()
        usable = [0 <= t < vocab and t not in specials for t in chunk]
        begin = next((i for i, t in enumerate(chunk) if usable[i] and _word_start(tok, t)), None)
        if begin is None:
            continue
        end = begin
        while end < len(chunk) and usable[end] and (end - begin < WINDOW or not _word_start(tok, chunk[end])):
            end += 1
        if end - begin >= 2:
            out.append(chunk[begin:end])
    return out


def fit(tok: Tokenizer, ids: torch.Tensor) -> dict[str, Any]:
    """How well `tok` reads these IDs: the share beyond its vocabulary, and on stretches of them,
    re-encoding stability (the share whose encode(decode(ids)) is ids) and characters of the
    decoded text that are not text."""
    # compared only when the vocabulary size fits the IDs' dtype: torch wraps a larger scalar
    # (uint8 IDs >= 2001 compares with 209)
    beyond = int((ids >= tok.vocab_size).sum()) if int(ids.max()) >= tok.vocab_size else 0
    same = chars = replacement = control = 0
    windows = stretches(tok, ids)
    for window in windows:
        text = tok.decode(window)
        same += tok.encode(text) == window
        r, c = not_text(text)
        replacement, control, chars = replacement + r, control + c, chars + len(text)
    return {
        "tokenizer": tok.name,
        "vocab_size": tok.vocab_size,
        "beyond_vocab": beyond,
        "beyond_share": beyond / max(1, ids.numel()),
        "stretches": len(windows),
        "stretches_same": same,
        "stability": same / len(windows) if windows else 1.0,
        "replacement_chars": replacement,
        "control_chars": control,
        "not_text_share": (replacement + control) / max(1, chars),
    }


def mismatches(tok: Tokenizer, ids: torch.Tensor, measured: dict[str, Any]) -> list[str]:
    """What says these IDs were written by another tokenizer, in words (empty: nothing does)."""
    problems = []
    if measured["beyond_share"] >= BEYOND_FOREIGN:
        problems.append(
            f"{measured['beyond_vocab']:,} of {ids.numel():,} IDs ({measured['beyond_share']:.1%}) are beyond its "
            f"{tok.vocab_size:,} tokens (largest {int(ids.max()):,})"
        )
    top = int(ids.max())
    if tok.kind != "char" and tok.vocab_size > 2 * BYTE_IDS and top < BYTE_IDS:
        # a subword tokenizer's text uses its merged tokens; IDs that never pass 255 are characters or bytes
        problems.append(
            f"all IDs are below {top + 1}, while {tok.kind} text uses its merged tokens up to {tok.vocab_size:,}"
        )
    if measured["stability"] < FOREIGN:
        problems.append(
            f"decoded and re-encoded, only {measured['stretches_same']} of {measured['stretches']} stretches of "
            f"its IDs come back the same (the tokenizer that wrote them: over {STABLE:.0%})"
        )
    if measured["not_text_share"] > NOT_TEXT_SHARE:
        problems.append(
            f"the decoded text is {measured['not_text_share']:.0%} replacement or control characters "
            f"({measured['replacement_chars']} U+FFFD, {measured['control_chars']} control)"
        )
    return problems


def ids_look_like(ids: torch.Tensor) -> str | None:
    """What the IDs look like on their own, where that can tell the tokenizer that wrote them."""
    top = int(ids.max())
    if top == GPT2_EOT:  # GPT-2's <|endoftext|> is its last ID and ends every document
        eots = count(ids, GPT2_EOT)
        return f"GPT-2 BPE: ID {GPT2_EOT} (GPT-2's <|endoftext|>) occurs {eots:,} times, none above it"
    distinct = int(torch.unique(ids[: 1 << 20]).numel())
    if top < 256 and distinct <= 256:
        return f"character IDs: {distinct} distinct values, all below {top + 1} (a char tokenizer or meta.pkl)"
    return None


def count(ids: torch.Tensor, value: int) -> int:
    """How often `value` occurs; 0 for a value past the largest ID (which the dtype may not hold)."""
    return int((ids == value).sum()) if 0 <= value <= int(ids.max()) else 0
