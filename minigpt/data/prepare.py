"""`prepare`: build the character vocabulary and the encoded train/val/test splits of a workspace.

Writes `workspace.tokenizer` (CharTokenizer JSON) and `workspace.ids(split)` (1-D tensors in the
smallest integer dtype that holds the vocabulary: uint8, int16 or int32). The source is streamed
in three passes (vocabulary and size, where to cut a single text, encoding), so memory stays
bounded by the largest split's IDs plus a few pieces of text, whatever the corpus size. Every
file is staged next to its target and all are replaced as one update (`minigpt.io.commit`) once
all of them were written: a failure leaves the workspace as it was, a crash the old files or the
new ones, never a mix. The library reports progress through
a plain callback and never imports a UI.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from minigpt.data.batches import id_dtype
from minigpt.data.corpus import (
    DECODING_POLICY,
    SPLIT_FRACTIONS,
    SPLIT_POLICY,
    LineStarts,
    SourcePlan,
    TextSource,
    choose_cuts,
    empty_corpus,
    open_source,
)
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import DataError, MiniGPTError, UnknownCharactersError, WorkspaceLockedError
from minigpt.io import lock
from minigpt.io.atomic import StagedWrite, stage_text, stage_torch_save
from minigpt.io.commit import commit_together
from minigpt.io.workspace import SPLITS, Workspace, settle

VOCAB_POLICY = (
    "the vocabulary is every character of all three splits (train, val and test), sorted by "
    "code point: WikiText-2's val/test hold characters train lacks (e.g. '#', '^', '×', '…'), "
    "which a train-only vocabulary could not encode"
)
WIKITEXT_POLICY = "a WikiText-2 folder keeps its own train/valid/test files (valid -> val), unchanged"
OVERWRITE_POLICY = (
    "an existing tokenizer is replaced only with force=True (--force), unless the new vocabulary "
    "is identical (same fingerprint)"
)

Progress = Callable[[str, float], None]  # (stage, overall fraction in [0, 1])


@dataclass
class PrepareSummary:
    """What `prepare_workspace` read and wrote; `to_dict()` is JSON-ready."""

    source: str  # what was passed: a folder, a file or "demo"
    source_kind: str  # "wikitext", "text-file" or "demo"
    source_files: list[str]  # files read (empty for the demo)
    tokenizer_path: str
    ids_paths: dict[str, str]  # split -> encoded IDs file
    vocab_size: int
    fingerprint: str  # SHA-256 of the vocabulary, as CharTokenizer.fingerprint
    tokens: dict[str, int]  # split -> number of tokens (= characters)
    ids_dtype: str  # e.g. "torch.uint8": the smallest integer type holding the vocabulary
    chars_beyond_train: list[str]  # in the vocabulary only because val/test hold them
    tokenizer_unchanged: bool  # an identical tokenizer was already there
    replaced_tokenizer: str | None  # fingerprint of the tokenizer force replaced ("unreadable" if corrupt)
    seconds: float  # wall time
    policies: dict[str, str] = field(default_factory=dict)  # name -> one-line policy
    notices: list[str] = field(default_factory=list)  # e.g. a text cut inside a line

    def to_dict(self) -> dict:
        return asdict(self)


_UNICODE = 0x110000  # code points


def code_points(text: str) -> torch.Tensor:
    """The code points of `text` as an int32 tensor, via the cheapest encoding that holds them
    (ASCII bytes, UTF-16 units when nothing is above U+FFFF, else UTF-32: 5x slower)."""
    if not text:
        return torch.zeros(0, dtype=torch.int32)
    if text.isascii():
        raw, dtype = text.encode("ascii"), torch.uint8
    else:
        raw, dtype = text.encode("utf-16-le"), torch.uint16
        if len(raw) != 2 * len(text):  # a character above U+FFFF took two UTF-16 units
            raw, dtype = text.encode("utf-32-le"), torch.int32
    return torch.frombuffer(bytearray(raw), dtype=dtype).to(torch.int32)  # bytearray: frombuffer wants it writable


def lookup_table(tokenizer: CharTokenizer) -> torch.Tensor:
    """Code point -> ID (int32, -1 for characters outside the vocabulary), one slot per code point."""
    table = torch.full((_UNICODE,), -1, dtype=torch.int32)
    table[torch.tensor([ord(c) for c in tokenizer.chars], dtype=torch.long)] = torch.arange(
        tokenizer.vocab_size, dtype=torch.int32
    )
    return table


def encode_to_tensor(
    tokenizer: CharTokenizer, text: str, dtype: torch.dtype = torch.long, table: torch.Tensor | None = None
) -> torch.Tensor:
    """Encode `text` as a 1-D tensor of `dtype`, same IDs as `tokenizer.encode`.

    A lookup table over code points: far faster than per-character dict lookups. Unknown
    characters raise `UnknownCharactersError` like `encode`.
    """
    ids = (lookup_table(tokenizer) if table is None else table).index_select(0, code_points(text))
    if bool((ids < 0).any()):
        tokenizer.encode(text)  # raises with the unknown characters and their positions
    return ids.to(dtype)


def check_overwrite(workspace: Workspace, new: CharTokenizer, *, force: bool) -> tuple[bool, str | None]:
    """Refuse to replace a different tokenizer without `force`.

    Returns (unchanged, replaced_fingerprint): whether an identical tokenizer is already there,
    and the fingerprint of a different one that `force` replaces.
    """
    path = workspace.tokenizer
    if not path.exists():
        return False, None
    try:
        old = CharTokenizer.from_file(path)
    except MiniGPTError as exc:
        if force:
            return False, "unreadable"
        raise DataError(
            f"Refusing to replace {path}: it exists but cannot be read ({exc.message}). Pass --force to replace it.",
            path=path,
        ) from None
    if old.fingerprint == new.fingerprint:
        return True, None
    if force:
        return False, old.fingerprint
    raise DataError(
        f"Refusing to replace the tokenizer {path} (vocab {old.vocab_size}, fingerprint "
        f"{old.fingerprint[:12]}) with a different one (vocab {new.vocab_size}, fingerprint "
        f"{new.fingerprint[:12]}): a new tokenizer silently invalidates every checkpoint trained "
        "with the old one, since the same IDs then mean other characters. Pass --force "
        "(force=True) to replace it, or prepare into another --workspace.",
        path=path,
        causes=["prepare was run before with another source"],
    )


def _changed(src: TextSource) -> DataError:
    return DataError(
        f"{src.name} changed while prepare was reading it (its text differs between two passes)",
        path=src.name,
        causes=["another program is writing the file: run prepare again once it is done"],
    )


def _scan(src: TextSource, progress: Callable[[int], None]) -> tuple[set[str], int]:
    """Pass 1: the characters of `src` and how many there are."""
    seen: set[int] = set()
    n = 0
    for piece in src.read():
        seen.update(torch.bincount(code_points(piece)).nonzero().flatten().tolist())
        n += len(piece)
        progress(n)
    if not n:
        raise empty_corpus(src.name)
    return {chr(c) for c in seen}, n


def _cut(src: TextSource, n: int) -> tuple[dict[str, tuple[int, int]], str | None]:
    """Pass 2 (a single text): the character range of each split (see `corpus.choose_cuts`)."""
    f = SPLIT_FRACTIONS
    starts = LineStarts(n, (n * f[0], n * (f[0] + f[1])))
    for piece in src.read():
        starts.feed(piece)
    c1, c2, notice = choose_cuts(n, starts.starts(), starts.count, source=src.name)
    return {"train": (0, c1), "val": (c1, c2), "test": (c2, n)}, notice


def _encode(
    src: TextSource,
    n: int,
    ranges: dict[str, tuple[int, int]],
    tokenizer: CharTokenizer,
    ws: Workspace,
    staged: dict[str, StagedWrite],
    progress: Callable[[int], None],
) -> set[int]:
    """Pass 3: encode `src` piece by piece into one tensor per split; each split is staged as soon
    as it is complete and its tensor freed. Returns the IDs that occur in train."""
    table, dtype = lookup_table(tokenizer), id_dtype(tokenizer.vocab_size)
    out: dict[str, torch.Tensor] = {}
    in_train: set[int] = set()
    pos = 0
    for piece in src.read():
        end = pos + len(piece)
        if end > n:
            raise _changed(src)
        try:
            ids = encode_to_tensor(tokenizer, piece, table=table)
        except UnknownCharactersError as exc:
            raise DataError(f"{_changed(src).message}: {exc.message}", path=src.name) from None
        for split, (lo, hi) in ranges.items():
            a, b = max(lo, pos), min(hi, end)
            if a >= b:
                continue
            if split not in out:
                out[split] = torch.empty(hi - lo, dtype=dtype)
            out[split][a - lo : b - lo] = ids[a - pos : b - pos]
            if split == "train":
                in_train.update(torch.bincount(ids[a - pos : b - pos]).nonzero().flatten().tolist())
            if b == hi:
                staged[split] = stage_torch_save(out.pop(split), ws.ids(split))
        pos = end
        progress(pos)
    if pos != n:
        raise _changed(src)
    return in_train


def _stage(report: Progress, stage: str, lo: float, hi: float, done: int, total: int) -> Callable[[int], None]:
    """Progress within one pass: `done + k` of `total` units maps into [lo, hi]."""
    return lambda k: report(stage, min(hi, lo + (hi - lo) * (done + k) / max(1, total)))


def _whole(plan: SourcePlan) -> TextSource:
    assert plan.whole is not None  # open_source sets per_split or whole
    return plan.whole


def prepare_workspace(
    source: str | os.PathLike,
    workspace: Workspace | str | os.PathLike,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> PrepareSummary:
    """Read `source`, build the vocabulary over all splits and write the workspace files.

    `source` is a WikiText-2 folder, a UTF-8 text file, or "demo" (see `minigpt.data.corpus`).
    Policies are in `PrepareSummary.policies`. Raises `DataError` on bad input or when a
    different tokenizer exists and `force` is False, `FileSystemError` when the OS refuses a
    write; nothing in the workspace changes in either case.
    """
    started = time.perf_counter()
    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    report = progress or (lambda stage, fraction: None)

    # fail before the work when a training run holds the workspace, its lock file is a link or a
    # special file, or its folders lead into another workspace
    busy = lock.holder(ws.root, refuse_unsafe=True)
    lock.refuse_shared_folders(ws.root, lock.WRITES["prepare"])
    if busy is not None:
        raise WorkspaceLockedError(
            f"workspace {ws.root} is in use: {busy.describe()}; prepare would replace its files under it",
            path=ws.root,
            holder=busy,
            causes=["wait for the run to end, or stop it"],
        )
    # an update a killed prepare (or import) left half done is finished first, and what killed
    # writers left half-written is removed: the vocabulary is compared with what is really there
    leftovers = settle(ws, "prepare").notices
    report("reading", 0.0)
    plan = open_source(source)
    texts: dict[str, TextSource] = plan.per_split if plan.per_split is not None else {"all": _whole(plan)}
    total_bytes = max(1, sum(t.size for t in texts.values()))
    done = 0

    # pass 1: vocabulary over every split, and the size of each text
    chars: set[str] = set()
    sizes: dict[str, int] = {}
    for key, src in texts.items():
        found, sizes[key] = _scan(src, _stage(report, "building vocabulary", 0.0, 0.3, done, total_bytes))
        chars |= found
        done += sizes[key]
    tokenizer = CharTokenizer(sorted(chars))
    unchanged, replaced = check_overwrite(ws, tokenizer, force=force)

    # pass 2: where a single text is cut into train/val/test
    notices: list[str] = list(leftovers)
    if plan.per_split is not None:
        ranges = {key: {key: (0, sizes[key])} for key in texts}
    else:
        report("finding the split points", 0.3)
        cut, notice = _cut(texts["all"], sizes["all"])
        ranges = {"all": cut}
        notices += [notice] if notice else []

    # pass 3: encode, staging each split's file; replace the workspace's files only at the end
    staged: dict[str, StagedWrite] = {}
    committed = False
    total_chars, done = sum(sizes.values()), 0
    try:
        in_train: set[int] = set()
        for key, src in texts.items():
            in_train |= _encode(
                src,
                sizes[key],
                ranges[key],
                tokenizer,
                ws,
                staged,
                _stage(report, "encoding", 0.4, 0.95, done, total_chars),
            )
            done += sizes[key]
        report("writing", 0.95)
        if not unchanged:
            staged["tokenizer"] = stage_text(tokenizer.to_json(), ws.tokenizer)
        # one writer per workspace: a training run must not start on half-replaced files (taken
        # only to swap the files in, so a refused prepare leaves no lock file behind)
        with lock.acquire(ws.root, "prepare") as held:
            notices += held.notices
            # again under the lock: another prepare may have replaced the tokenizer meanwhile
            unchanged, replaced = check_overwrite(ws, tokenizer, force=force)
            if unchanged and "tokenizer" in staged:
                staged.pop("tokenizer").discard()
            elif not unchanged and "tokenizer" not in staged:
                staged["tokenizer"] = stage_text(tokenizer.to_json(), ws.tokenizer)
            # the token files and the tokenizer as one update: a crash leaves the old files or
            # the new ones, never new IDs under the old vocabulary (see minigpt.io.commit)
            commit_together(
                ws.root,
                [staged[split] for split in (*SPLITS, "tokenizer") if split in staged],
                command="prepare",
                what=f"the corpus {plan.source} (vocab {tokenizer.vocab_size}, "
                f"fingerprint {tokenizer.fingerprint[:12]})",
            )
        committed = True
    finally:
        if not committed:
            for write in staged.values():
                write.discard()
    report("done", 1.0)

    tokens = {split: hi - lo for r in ranges.values() for split, (lo, hi) in r.items()}
    policies = {
        "vocabulary": VOCAB_POLICY,
        "decoding": DECODING_POLICY,
        "overwrite": OVERWRITE_POLICY,
        "split": WIKITEXT_POLICY if plan.kind == "wikitext" else SPLIT_POLICY,
    }
    return PrepareSummary(
        source=plan.source,
        source_kind=plan.kind,
        source_files=plan.files,
        tokenizer_path=str(ws.tokenizer),
        ids_paths={s: str(ws.ids(s)) for s in SPLITS},
        vocab_size=tokenizer.vocab_size,
        fingerprint=tokenizer.fingerprint,
        tokens={s: tokens[s] for s in SPLITS},
        ids_dtype=str(id_dtype(tokenizer.vocab_size)),
        chars_beyond_train=[c for i, c in enumerate(tokenizer.chars) if i not in in_train],
        tokenizer_unchanged=unchanged,
        replaced_tokenizer=replaced,
        seconds=time.perf_counter() - started,
        policies=policies,
        notices=notices,
    )
