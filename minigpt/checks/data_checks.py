"""The stored token IDs: integers in the vocabulary's range, decoding to text, and held-out splits that
neither repeat train's text nor use tokens train never shows (the batches cut from them: `batch_checks`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status


@check("token_range", "data", "IDs are integers in [0, vocab_size)", depends=("tokenizer_roundtrip",))
def token_range(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    vocab = ctx.tokenizer.vocab_size
    per_split: dict[str, dict[str, Any]] = {}
    bad_total = 0
    for name, ids in ctx.splits.items():
        if ids.dtype.is_floating_point or ids.dtype == torch.bool:
            raise Outcome(Status.FAIL, f"{name} IDs have dtype {ids.dtype}", values={"dtype": str(ids.dtype)})
        bad = ((ids < 0) | (ids >= vocab)).nonzero().flatten()
        lo, hi = torch.aminmax(ids)
        per_split[name] = {
            "tokens": ids.numel(),
            "dtype": str(ids.dtype),
            "min": int(lo),
            "max": int(hi),
            "out_of_range": bad.numel(),
            "positions": bad[:10].tolist(),
            "offending_ids": ids[bad[:10]].tolist(),
        }
        bad_total += bad.numel()
    values = {"vocab_size": vocab, "splits": per_split}
    if bad_total:
        where = "; ".join(
            f"{n}: {s['out_of_range']} IDs e.g. {s['offending_ids'][:3]} at {s['positions'][:3]}"
            for n, s in per_split.items()
            if s["out_of_range"]
        )
        raise Outcome(
            Status.FAIL,
            f"{bad_total} IDs outside [0, {vocab}): {where}",
            values=values,
            causes=[
                "the IDs were encoded with another (larger) tokenizer",
                "an off-by-one when adding special tokens",
                "the file was corrupted",
            ],
            fixes=["re-run `minigpt prepare` so IDs and tokenizer come from one vocabulary"],
        )
    return (
        f"{sum(s['tokens'] for s in per_split.values()):,} IDs in {len(per_split)} splits, all in [0, {vocab})"
    ), values


@check("decoded_sample", "data", "Stored IDs decode to readable text", depends=("token_range",))
def decoded_sample(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok, ids = ctx.tokenizer, ctx.splits["train"]
    start = ids.numel() // 3
    text = tok.decode(ids[start : start + 300].tolist())
    letters = sum(c.isalpha() for c in text) / max(1, len(text))
    longest_run = max((len(run) for run in _runs(text)), default=0)
    values = {"start": start, "text": text, "letter_fraction": round(letters, 3), "longest_run": longest_run}
    signs = []
    if "\ufffd" in text:
        signs.append("U+FFFD replacement characters (text was decoded with the wrong encoding)")
    if letters < 0.3:
        signs.append(f"only {letters:.0%} letters (binary data or shuffled IDs?)")
    if longest_run > 50:
        signs.append(f"one character repeated {longest_run} times (padding or a constant fill?)")
    if signs:
        raise Outcome(
            Status.WARN,
            "; ".join(signs),
            values=values,
            causes=["corrupted or mis-encoded source text", "IDs from another tokenizer"],
            fixes=["read the decoded sample; re-run `minigpt prepare` on the original text"],
        )
    return f"300 IDs from position {start:,} decode to text with {letters:.0%} letters", values


LEAK_WARN_SHARE = 0.05  # WikiText-2's own splits share ~0-2% of 64-char windows (headings, boilerplate)
LEAK_FAIL_SHARE = 0.5
UNSEEN_WARN_SHARE = 0.001  # held-out tokens whose character training never shows
UNSEEN_SUBWORD_WARN_SHARE = 0.01  # held-out tokens of a subword vocabulary that training never shows


@check("split_overlap", "data", "Validation/test text does not also occur in training", depends=("token_range",))
def split_overlap(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    from minigpt.data.splits import WINDOW, overlap

    splits, vocab = ctx.splits, ctx.tokenizer.vocab_size
    held_out = [name for name in ("val", "test") if name in splits]
    if not held_out:
        raise Outcome(Status.SKIP, "no val or test split in this workspace: nothing to compare with train")
    results = {name: overlap(splits["train"], splits[name], vocab, name) for name in held_out}
    tok = ctx.tokenizer
    values = {
        "window": WINDOW,
        "splits": {
            name: {
                "identical_to_train": o.identical,
                "contained_in_train": o.contained,
                "windows_probed": o.probes,
                "windows_found_in_train": o.found,
                "share": round(o.share, 4),
                "examples": [
                    {**e, "text": tok.decode(splits[name][e["offset"] : e["offset"] + WINDOW].tolist())}
                    for e in o.examples
                ],
            }
            for name, o in results.items()
        },
    }
    causes = [
        "the split was made after shuffling overlapping windows, or by sampling lines with replacement",
        "the same file was passed for two splits",
        "duplicated documents in the corpus (deduplicate before splitting)",
    ]
    fixes = ["split the corpus by document or by contiguous position, then deduplicate across splits"]
    same = [n for n, o in results.items() if o.identical or o.contained]
    if same:
        what = "; ".join(f"{n} is {'identical to' if results[n].identical else 'contained in'} train" for n in same)
        raise Outcome(
            Status.FAIL,
            f"{what}: its loss measures memorisation, not generalisation",
            values=values,
            causes=causes,
            fixes=fixes,
        )
    worst = max(results.values(), key=lambda o: o.share)
    summary = ", ".join(f"{o.found}/{o.probes} {n} windows" for n, o in results.items())
    if worst.share >= LEAK_WARN_SHARE:
        status = Status.FAIL if worst.share >= LEAK_FAIL_SHARE else Status.WARN
        where = f"{worst.share:.0%} of {worst.split}"
        raise Outcome(
            status,
            f"{summary} of {WINDOW} tokens occur verbatim in train ({where})",
            values=values,
            causes=causes,
            fixes=fixes,
        )
    return f"{summary} of {WINDOW} tokens found verbatim in train (below {LEAK_WARN_SHARE:.0%})", values


@check("split_vocabulary", "data", "Every character of val/test occurs in train", depends=("token_range",))
def split_vocabulary(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    from minigpt.data.splits import unseen_characters

    splits, tok = ctx.splits, ctx.tokenizer
    held_out = [name for name in ("val", "test") if name in splits]
    if not held_out:
        raise Outcome(Status.SKIP, "no val or test split in this workspace")
    values: dict = {"splits": {}}
    worst_share, worst = 0.0, ""
    unit = "characters" if tok.kind == "char" else "tokens"
    # a subword vocabulary holds many rare tokens a small corpus never shows in train: judged
    # on a larger share than characters
    limit = UNSEEN_WARN_SHARE if tok.kind == "char" else UNSEEN_SUBWORD_WARN_SHARE
    for name in held_out:
        unseen = unseen_characters(splits["train"], splits[name], tok.vocab_size)
        total = sum(unseen.values())
        share = total / max(1, splits[name].numel())
        chars = sorted(unseen.items(), key=lambda kv: -kv[1])
        values["splits"][name] = {
            # labelled as every view shows a token: a split character's bytes as <0xE2>, a space as ␣
            "unseen_characters": [{"char": tok.token_label(i), "id": i, "count": c} for i, c in chars[:20]],
            "distinct_unseen": len(unseen),
            "unseen_tokens": total,
            "share": share,
        }
        if share >= worst_share and unseen:
            worst_share = share
            worst = f"{name}: {len(unseen)} {unit} never in train ({total:,} tokens, {share:.2%}), e.g. " + " ".join(
                tok.token_label(i) for i, _ in chars[:6]
            )
    if worst_share >= limit:
        raise Outcome(
            Status.WARN,
            worst,
            values=values,
            causes=[
                "the splits come from different sources or encodings",
                "the split is by document and some documents use other scripts",
            ],
            fixes=[
                "the model can only guess these characters: expect a higher val loss",
                "normalise the text (e.g. NFKC) or split the corpus uniformly",
            ],
        )
    if worst:
        return f"rare {unit} never in train ({worst}); below {limit:.1%} of tokens", values
    return f"every {unit[:-1]} of {' and '.join(held_out)} occurs in train", values


def _runs(text: str) -> Iterator[str]:
    run = ""
    for c in text:
        run = run + c if run and run[-1] == c else c
        yield run
