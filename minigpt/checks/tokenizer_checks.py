"""Checks that the token files and the tokenizer belong together, for any tokenizer (char, tiktoken,
Hugging Face, SentencePiece): IDs the tokenizer has, decoded text that is text, IDs that re-encode
to themselves, and the special tokens where the run put them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.data.tokenizer_fit import STABLE, count, fit, ids_look_like, mismatches
from minigpt.data.tokenizer_load import load_tokenizer, workspace_tokenizer
from minigpt.errors import MiniGPTError
from minigpt.model.contract import config_lookup

DOUBLED_SHARE = 0.1  # BOS tokens directly after another BOS


@check(
    "token_files_tokenizer",
    "tokenizer",
    "Token files were written by this tokenizer",
    depends=("tokenizer_roundtrip",),
)
def token_files_tokenizer(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok, ids = ctx.tokenizer, ctx.splits["train"]
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.numel() == 0:
        raise Outcome(Status.SKIP, "skipped: the train IDs are no integers (see token_range)")
    ours = fit(tok, ids)
    values: dict[str, Any] = {"this": ours, "ids_look_like": ids_look_like(ids)}
    other = _workspace_alternative(ctx, tok, ids)
    if other is not None:
        values["workspace_tokenizer"] = other
    problems = mismatches(tok, ids, ours)
    better = []
    if values["ids_look_like"]:
        better.append(f"the IDs look like {values['ids_look_like']}")
    if other is not None and _better(other, ours):
        share = f"{other['stability']:.0%}"
        better.append(f"the workspace's own {other['tokenizer']} reads them ({share} of stretches come back)")
    if problems:
        raise Outcome(
            Status.FAIL,
            f"token files written by another tokenizer than {tok.describe()}: " + "; ".join(problems),
            values=values,
            causes=better
            + [
                "a char meta.pkl or char_tokenizer.json beside BPE token files, or a BPE tokenizer given for char ones",
                "the tokenizer of another run or dataset",
            ],
            fixes=[
                "--tokenizer the file the IDs were encoded with (tiktoken:gpt2 for nanoGPT's GPT-2 BPE data)",
                "re-encode the corpus with the tokenizer the model is meant to use",
            ],
        )
    if ours["stability"] < STABLE:
        raise Outcome(
            Status.WARN,
            f"only {ours['stretches_same']} of {ours['stretches']} stretches of IDs come back the same when "
            f"decoded and re-encoded with {tok.describe()}",
            values=values,
            causes=better + ["a normalising tokenizer (its changes are shown in tokenizer_roundtrip)"],
            fixes=["compare the decoded sample (decoded_sample) with the source text"],
        )
    beyond = (
        f"{ours['beyond_vocab']:,} IDs beyond it, too few to mean another tokenizer (token_range judges them)"
        if ours["beyond_vocab"]
        else "none beyond it"
    )
    return (
        f"{ours['stretches_same']} of {ours['stretches']} stretches of IDs re-encode to themselves with "
        f"{tok.kind} vocab {tok.vocab_size:,}; {beyond}"
    ), values


def _better(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether fit `a` reads the IDs better than fit `b`: fewer IDs beyond it, then more come back."""
    return not a["beyond_vocab"] and (a["beyond_share"], -a["stability"]) < (b["beyond_share"], -b["stability"])


def _workspace_alternative(ctx: CheckContext, tok: Tokenizer, ids: torch.Tensor) -> dict[str, Any] | None:
    """The workspace's own tokenizer's fit, when --tokenizer named another one."""
    own = workspace_tokenizer(ctx.ws.tokenizer)
    given = ctx.inputs.tokenizer
    if not own.is_file() or (given is not None and Path(given).resolve() == own.resolve()):
        return None
    try:
        other = load_tokenizer(own)
    except MiniGPTError:
        return None
    return None if other.fingerprint == tok.fingerprint else fit(other, ids)


@check("special_tokens", "tokenizer", "Special tokens as the run used them", depends=("token_files_tokenizer",))
def special_tokens(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    tok, ids = ctx.tokenizer, ctx.splits["train"]
    special = tok.special_tokens
    values: dict[str, Any] = {"special_tokens": dict(list(special.items())[:20]), "eot_id": tok.eot_id}
    if not special and tok.eot_id is None:
        return f"no special tokens ({tok.kind} vocabulary)", values
    rows = config_lookup(ctx.base_config(), "vocab_size")
    if isinstance(rows, int) and not isinstance(rows, bool):
        outside = {name: i for name, i in special.items() if i >= rows}
        values.update(model_rows=rows, beyond_rows=outside)
        if outside:
            shown = ", ".join(f"{name} ({i})" for name, i in list(outside.items())[:5])
            raise Outcome(
                Status.FAIL,
                f"{len(outside)} special token(s) beyond the model's {rows:,} embedding rows: {shown}; "
                "the model cannot read or write them",
                values=values,
                causes=["tokens added to the tokenizer after the model was built (chat or padding tokens)"],
                fixes=["model.resize_token_embeddings(len(tokenizer)) before training", "pad vocab_size past them"],
            )
    notes = []
    bos = tok.bos_id
    if bos is not None:
        bos_count = count(ids, bos)
        at = ids == bos if bos_count else None
        doubled = int((at[1:] & at[:-1]).sum()) if at is not None else 0
        values.update(bos_id=bos, bos_count=bos_count, bos_doubled=doubled)
        if doubled and doubled >= DOUBLED_SHARE * bos_count:
            raise Outcome(
                Status.FAIL,
                f"BOS doubled: {doubled:,} of {bos_count:,} BOS tokens ({bos}) follow another BOS",
                values=values,
                causes=["the text already began with BOS and the tokenizer added one more (add_special_tokens=True)"],
                fixes=["add BOS once: encode with add_special_tokens=False or strip the text's own BOS"],
            )
        if bos_count:
            notes.append(f"BOS {bos} {bos_count:,} times")
    eot = tok.eot_id
    if eot is not None:
        eots = count(ids, eot)
        values.update(eot_count=eots, eot_every=ids.numel() / eots if eots else None)
        if not eots:
            raise Outcome(
                Status.WARN,
                f"no end-of-text token ({eot}) in {ids.numel():,} train IDs: documents run into each other "
                "and samples never learn where to stop",
                values=values,
                causes=["the corpus was encoded as one text (nanoGPT's prepare.py appends EOT to each document)"],
                fixes=["append the EOT token after every document when encoding"],
            )
        notes.append(f"EOT {eot} {eots:,} times, one every {ids.numel() / eots:,.0f} tokens")
    return "; ".join(notes) or "special tokens present, none in the train IDs", values
