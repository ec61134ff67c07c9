"""Checks on the environment, the files, the tokenizer and the token IDs (the batches: `batch_checks`)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import torch

from minigpt.checks.adapter import full_logits
from minigpt.checks.batch_checks import DEBUG_BATCH_SIZE, block_size
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.device import mps_available
from minigpt.errors import DataError, FileSystemError, MiniGPTError
from minigpt.io.files import describe_size, stat_input

SAMPLE_TEXT = "Hello, world!\nThe quick brown fox jumps over the lazy dog. 0123456789"
SMALL_FILE_BYTES = 64  # smaller than any real tokenizer or token file: an interrupted conversion


def _torch_version_tuple() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


@check("environment", "environment", "Python, torch and the device")
def environment(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    values = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_version": torch.version.cuda,
        "mps_available": mps_available(),
        "platform": platform.platform(),
        "executable": sys.executable,
    }
    device = ctx.device
    values["device"] = str(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        values.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    warnings, causes, fixes = [], [], []
    if ctx.options.expect_gpu and device.type == "cpu":
        warnings.append("--expect-gpu given but running on CPU")
        causes += [
            "torch was installed as a CPU-only build",
            "CUDA_VISIBLE_DEVICES hides the GPU",
            "the NVIDIA driver is missing or too old for this torch",
        ]
        fixes += [
            "python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'",
            "reinstall torch with the CUDA wheel that matches your driver",
        ]
    if _torch_version_tuple() < (2, 10):
        warnings.append(f"torch {torch.__version__} is older than 2.10")
        causes.append("older torch has a weights_only unpickler vulnerability (CVE-2026-24747)")
        fixes.append("pip install 'torch>=2.10'")
    gpu = f", {values['gpu_name']} {values['gpu_memory_gib']} GiB" if "gpu_name" in values else ""
    summary = f"Python {values['python']}, torch {values['torch']}, device {device}{gpu}"
    if warnings:
        raise Outcome(Status.WARN, summary + "; " + "; ".join(warnings), causes=causes, fixes=fixes, values=values)
    return summary, values


@check("files", "files", "Required files present and plausibly sized")
def files(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    inputs = ctx.inputs
    # an encoding named by tiktoken:NAME is no file here: tokenizer_roundtrip reports its loading
    required = {"tokenizer": inputs.tokenizer} if inputs.tokenizer is not None else {}
    required["train_ids"] = inputs.train_data
    optional = {
        "val_ids": ctx.ws.ids("val"),
        "test_ids": ctx.ws.ids("test"),
        "checkpoint": inputs.checkpoint or inputs.checkpoint_default,
        "metrics": ctx.inputs.metrics,
    }
    rows, missing, small, unreadable, absent_optional = [], [], [], [], []
    for role, path in {**required, **optional}.items():
        size, problem = _input_size(path, role)
        exists = size is not None
        status = "ok" if exists else ("missing" if role in required else "absent")
        if problem and (path.exists() or path.is_symlink()):  # a loop, a FIFO, a folder, no permission
            status = "unreadable"
            unreadable.append(problem)
        # a torch.save file is never under 64 bytes; a JSON tokenizer of a few characters can be
        # (its own loader names what is wrong with it, in tokenizer_roundtrip)
        elif size == 0 and role == "metrics":
            status = "empty"  # a run that has not logged yet (a loop just started): training_curve says so
        elif size is not None and (size == 0 or (size < SMALL_FILE_BYTES and role not in ("metrics", "tokenizer"))):
            status = "empty" if size == 0 else "suspiciously small"
            small.append(f"{role} {path} ({size} B)")
        if not exists and status != "unreadable" and role in required:
            missing.append(f"{role} {path}")
        if not exists and role not in required:
            absent_optional.append(role)
        rows.append(
            {
                "role": role,
                "path": str(path),
                "exists": exists,
                "bytes": size,
                "size": describe_size(size) if size is not None else None,
                "status": status,
                "required": role in required,
            }
        )
    values = {"files": rows}
    if missing and not unreadable and not small and ctx.ws.loop_log.is_file():
        # a watched loop's folder holds logs, not a prepared corpus: what is absent is not a fault
        # (a tokenizer copied in beside the logs, for samples, is not a prepared workspace either)
        absent = " and ".join(role.replace("_", " ") for role in required if f"{role} {required[role]}" in missing)
        raise Outcome(
            Status.SKIP,
            f"a watched loop's folder ({ctx.ws.loop_log} holds the loop's record): no {absent} here, "
            "so the data, model and checkpoint checks are skipped; the loop checks and training_curve read the logs",
            values=values,
        )
    if missing or small or unreadable:
        raise Outcome(
            Status.FAIL,
            "; ".join(
                ([f"missing: {', '.join(missing)}"] if missing else [])
                + ([f"too small: {', '.join(small)}"] if small else [])
                + unreadable
            ),
            causes=[
                "`minigpt prepare` was not run in this workspace",
                "wrong --workspace/--tokenizer/--train-data",
                "an interrupted conversion or copy left an empty file",
            ],
            fixes=["minigpt prepare --source demo --workspace DIR (or your corpus)", "check the paths printed above"],
            values=values,
        )
    note = f" (not present: {', '.join(absent_optional)})" if absent_optional else ""
    return f"{sum(1 for r in rows if r['exists'])} files found{note}", values


def _input_size(path: Path, role: str) -> tuple[int | None, str | None]:
    """(size, None) for a readable regular file (or a folder, for a TensorBoard metrics log);
    (None, why) otherwise, with the reason in the words `stat_input` uses."""
    if role == "metrics" and path.is_dir():
        return sum(f.stat().st_size for f in path.iterdir() if f.is_file()), None
    try:
        return stat_input(path, role.replace("_", " "), error=DataError).st_size, None
    except (DataError, FileSystemError) as exc:
        return None, exc.message


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
        values["first_chars"] = [repr(_raw(tok, i)) for i in first]
        values["last_chars"] = [repr(_raw(tok, i)) for i in last]
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
            "unseen_characters": [{"char": _raw(tok, i), "id": i, "count": c} for i, c in chars[:20]],
            "distinct_unseen": len(unseen),
            "unseen_tokens": total,
            "share": share,
        }
        if share >= worst_share and unseen:
            worst_share = share
            worst = f"{name}: {len(unseen)} {unit} never in train ({total:,} tokens, {share:.2%}), e.g. " + " ".join(
                repr(_raw(tok, i)) for i, _ in chars[:6]
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


def _raw(tok, i: int) -> str:
    """A token's text as it is (a character tokenizer's character), for values and messages."""
    return tok.token_bytes(i).decode("utf-8", errors="replace")


def _runs(text: str):
    run = ""
    for c in text:
        run = run + c if run and run[-1] == c else c
        yield run
