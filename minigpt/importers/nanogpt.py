"""Open a nanoGPT run (`out_dir/ckpt.pt` + `data/<dataset>/`) as a minigpt workspace: a
character-level one (meta.pkl) or a GPT-2 BPE one (no meta.pkl, or --tokenizer).

`GPT` is nanoGPT's model under nanoGPT's own parameter names, so its checkpoint loads strictly,
with no renaming. `import_nanogpt` reads the run without ever unpickling code and writes the
workspace files the rest of minigpt reads:

    nanoGPT                                  workspace
    ckpt.pt  model (state dict)          ->  checkpoints/mini_gpt_best.pt  model_state_dict, same names:
             (`_orig_mod.` / `module.` prefixes stripped; the `*.attn.bias` causal-mask buffers
             that torch < 2.0 runs save are dropped: this GPT builds its mask in SDPA)
             model_args                  ->  config (+ "model_class": "minigpt.model.nanogpt.GPT")
             iter_num                    ->  step
             best_val_loss (0-d tensor)  ->  best_val_loss (float)
             config (train.py settings)  ->  imported_from["config"]
             optimizer                   ->  not carried (nanoGPT's AdamW groups; minigpt trains MiniGPT)
    meta.pkl itos {id: char}             ->  tokenizer/char_tokenizer.json chars[id]; its fingerprint
                                             is the checkpoint's tokenizer_fingerprint
    no meta.pkl (openwebtext, shakespeare)->  GPT-2's encoding (tiktoken:gpt2), as nanoGPT's sample.py
    or --tokenizer PATH|tiktoken:NAME        assumes, or the tokenizer given, stored in tokenizer/
                                             (gpt2.tiktoken, tokenizer.json, tokenizer.model); a
                                             vocab_size padded past it (50304 for 50257) is kept
    train.bin / val.bin (uint16)         ->  data/encoded/{train,val}_ids.pt (smallest integer dtype;
                                             nanoGPT has no test split)
    its stdout (--log, optional)         ->  logs/metrics.jsonl (`nanogpt_log`: train/val loss per
                                             step, the learning rate from config via get_lr)

The workspace is a new or empty folder, or the one nanoGPT's loop was watched into: the import then
goes beside the loop's logs and leaves them as they are (`minigpt.importers.destination`).

`ckpt.pt` is read by `minigpt.io.torch_files` (bounded, `weights_only=True`); `meta.pkl` with an
unpickler that refuses every global, so a payload that would run code is refused before it runs.
The `.bin` files are memory-mapped and converted in chunks: an import never holds a split in RAM.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.data.tokenizer_fit import fit, ids_look_like, mismatches
from minigpt.data.tokenizer_load import load_tokenizer, stage_in_workspace
from minigpt.errors import CheckpointError, ConfigError, DataError, TokenizerError
from minigpt.importers.destination import require_same_run, watched_loop_header
from minigpt.importers.nanogpt_log import read_nanogpt_log
from minigpt.importers.nanogpt_pickles import read_meta
from minigpt.io.atomic import StagedWrite, stage_same_file, stage_text, stage_torch_save, temp_prefix
from minigpt.io.commit import commit_together
from minigpt.io.files import os_error, stat_input
from minigpt.io.workspace import Workspace, settle
from minigpt.logs.record import json_line
from minigpt.model.checkpoint import CHECKPOINT, compare_state_dict, read_checkpoint, require_finite, strip_prefixes
from minigpt.model.nanogpt import GPT, MODEL_CLASS, GPTConfig

CHUNK_TOKENS = 1 << 22  # tokens converted per step (8 MiB of uint16)
GPT2 = "tiktoken:gpt2"  # what nanoGPT's sample.py decodes with when a dataset has no meta.pkl
GPT2_VOCAB = 50257
FIT_SAMPLE = 1 << 16  # train.bin IDs the tokenizer is tried on before anything is written


NANOGPT_CHECKPOINT = replace(
    CHECKPOINT,
    title="nanoGPT checkpoint",
    missing=("--out-dir is the out_dir train.py saved to",),
    unsafe_causes=(
        "nanoGPT's own checkpoint holds only tensors, numbers, strings and dicts",
        "a modified train.py saved an object there (e.g. argparse args instead of a dict)",
        "save it as plain values: torch.save({..., 'config': vars(args)}, path)",
    ),
)


def read_nanogpt_checkpoint(path: str | os.PathLike) -> dict:
    """nanoGPT's `ckpt.pt` through `read_checkpoint`; a refused object names its key."""
    data = read_checkpoint(path, NANOGPT_CHECKPOINT)
    if not isinstance(data.get("model"), dict) or not isinstance(data.get("model_args"), dict):
        raise CheckpointError(
            f"Not a nanoGPT checkpoint: {path} has no 'model' and 'model_args' (keys: {sorted(map(str, data))[:8]})",
            path=path,
            causes=["a minigpt checkpoint needs no import: use it with --checkpoint", "another training script"],
        )
    return data


def _load_weights(model: GPT, state_dict: dict, path: Path) -> list[str]:
    state_dict, notices = strip_prefixes(dict(state_dict))
    masks = [k for k in state_dict if k.endswith(".attn.bias") and getattr(state_dict[k], "dim", lambda: 0)() == 4]
    if masks:
        state_dict = {k: v for k, v in state_dict.items() if k not in masks}
        notices.append(f"dropped {len(masks)} causal-mask buffers (*.attn.bias) saved by nanoGPT without flash")
    head, wte = state_dict.get("lm_head.weight"), state_dict.get("transformer.wte.weight")
    if isinstance(head, torch.Tensor) and isinstance(wte, torch.Tensor) and not torch.equal(head, wte):
        raise CheckpointError(
            f"{path}: lm_head.weight differs from transformer.wte.weight, but nanoGPT ties them",
            path=path,
            causes=["the run used a modified model.py without weight tying: pass it with --model"],
        )
    mismatch = compare_state_dict(model, state_dict)
    if mismatch:
        raise CheckpointError(
            f"{path} does not fit nanoGPT's GPT built from its model_args: {mismatch.describe()}",
            path=path,
            causes=["the run used a modified model.py: pass it with --model FILE.py:GPT", "model_args was edited"],
        )
    require_finite(state_dict, path, use="import")
    model.load_state_dict(state_dict, strict=True)
    return notices


# --- train.bin / val.bin ----------------------------------------------------------------------


def open_bin(path: Path) -> np.memmap:
    """A nanoGPT token file as a read-only uint16 memory map (nothing is read yet)."""
    st = stat_input(path, "nanoGPT token file", error=DataError, missing=["--data-dir is nanoGPT's data/<dataset>"])
    if st.st_size == 0 or st.st_size % 2:
        raise DataError(
            f"Not a nanoGPT token file: {path} is {st.st_size} bytes; expected a non-zero even size (uint16 IDs)",
            path=path,
            causes=["an interrupted prepare.py", "another kind of file"],
        )
    return np.memmap(path, dtype=np.uint16, mode="r")


def stage_ids(
    src: np.memmap, dest: Path, dtype: torch.dtype, vocab_size: int, source: Path, vocab_of: str = "meta.pkl"
) -> StagedWrite:
    """Convert `src` chunk by chunk into a disk-backed scratch array of `dtype`, then stage it as
    `torch.save` of a 1-D tensor (what `data.load_ids` reads). An ID >= vocab_size is refused."""
    np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        # named as staged files are (PID and host): a killed import's scratch is removed as theirs are
        fd, scratch = tempfile.mkstemp(prefix=temp_prefix(dest, "scratch"), suffix=".tmp", dir=dest.parent)
    except OSError as exc:
        raise os_error(exc, dest, kept=True) from None
    try:
        try:  # every block reserved now: writing a page of a map on a full disk is a SIGBUS, not an error
            os.posix_fallocate(fd, 0, max(1, len(src) * np_dtype.itemsize))
        except OSError as exc:
            raise os_error(exc, dest, kept=True) from None
        finally:
            os.close(fd)
        out = np.memmap(scratch, dtype=np_dtype, mode="r+", shape=(len(src),))
        for start in range(0, len(src), CHUNK_TOKENS):
            chunk = src[start : start + CHUNK_TOKENS]
            top = int(chunk.max())
            if top >= vocab_size:
                at = start + int(np.argmax(chunk >= vocab_size))
                raise DataError(
                    f"{source} holds ID {top} at token {at:,}, outside the vocabulary of {vocab_of} ({vocab_size})",
                    path=source,
                    causes=[f"train.bin/val.bin and {vocab_of} come from different prepare.py runs"],
                )
            out[start : start + len(chunk)] = chunk
        out.flush()
        return stage_torch_save(torch.from_numpy(out), dest)  # pages stream from the scratch file
    finally:
        os.unlink(scratch)


# --- the import ---------------------------------------------------------------------------------


@dataclass
class ImportSummary:
    """What `import_nanogpt` read and wrote; `to_dict()` is JSON-ready."""

    checkpoint: str  # nanoGPT's ckpt.pt
    workspace: str
    written: dict[str, str]  # role -> path
    step: int | None  # nanoGPT's iter_num
    best_val_loss: float | None
    config: dict  # model_args
    parameters: int  # distinct parameters (the tied head counted once)
    vocab_size: int  # the tokenizer's (the model's may be padded past it)
    fingerprint: str
    tokens: dict[str, int]  # split -> tokens
    ids_dtype: str
    seconds: float
    notices: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)  # the checkpoint's whole `config`: train.py's settings
    log_records: int | None = None  # metrics records written from --log (None: no log given)
    tokenizer: str = ""  # which tokenizer, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _number(value: object, name: str, path: Path) -> float | None:
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckpointError(f"{path}: '{name}' should be a number; found {type(value).__name__}", path=path)
    return float(value) if math.isfinite(value) else None


def import_nanogpt(
    out_dir: str | os.PathLike,
    data_dir: str | os.PathLike,
    workspace: str | os.PathLike,
    *,
    log: str | os.PathLike | None = None,
    tokenizer: str | os.PathLike | None = None,
) -> ImportSummary:
    """Read nanoGPT's `out_dir/ckpt.pt` and `data_dir/{meta.pkl,train.bin,val.bin}` and write them
    into `workspace` as a minigpt run; `tokenizer` (a path or tiktoken:NAME) reads the IDs instead
    of meta.pkl, and without either the IDs are GPT-2's BPE. Everything is validated and staged first, then replaced
    together (the checkpoint last) while holding the workspace lock; a failure writes nothing.
    Raises CheckpointError / DataError / ConfigError on bad input."""
    from minigpt.data.batches import id_dtype
    from minigpt.io.lock import acquire
    from minigpt.model.factory import MODEL_CLASS_KEY, require_buildable

    started = time.perf_counter()
    ws, out_dir, data_dir = Workspace(Path(workspace)), Path(out_dir).expanduser(), Path(data_dir).expanduser()
    # an update a killed import (or prepare) left half done is finished first, and what killed
    # writers left half-written removed: what the workspace holds is then judged as it really is
    notices: list[str] = settle(ws, "import").notices
    try:
        watched = watched_loop_header(ws, log=log)
    except DataError as exc:
        if notices:  # say what was finished: it is what the refusal found
            raise DataError(f"{exc.message} ({'; '.join(notices)})", path=exc.path, causes=exc.causes) from None
        raise
    ckpt_path = out_dir / "ckpt.pt"
    raw = read_nanogpt_checkpoint(ckpt_path)
    try:
        cfg = GPTConfig.from_dict(dict(raw["model_args"]))
    except (ConfigError, TypeError) as exc:
        raise CheckpointError(
            f"{ckpt_path}: model_args does not describe nanoGPT's GPT: {getattr(exc, 'message', exc)}",
            path=ckpt_path,
            causes=getattr(exc, "causes", []),
        ) from None
    tok, vocab_of = _run_tokenizer(data_dir, tokenizer, cfg.vocab_size, notices)
    bins = {split: open_bin(data_dir / f"{split}.bin") for split in ("train", "val")}
    _refuse_foreign_ids(tok, vocab_of, bins["train"], data_dir / "train.bin")
    stored = sum(v.numel() for v in raw["model"].values() if isinstance(v, torch.Tensor))
    require_buildable({**cfg.to_dict(), MODEL_CLASS_KEY: MODEL_CLASS}, ckpt_path, stored=stored)  # before GPT(cfg)
    model = GPT(cfg)
    notices += _load_weights(model, raw["model"], ckpt_path)
    if watched is not None:
        notices.append(require_same_run(watched, sum(p.numel() for p in model.parameters()), ws, ckpt_path))
    iter_num = raw.get("iter_num")
    if iter_num is not None and (isinstance(iter_num, bool) or not isinstance(iter_num, int) or iter_num < 0):
        raise CheckpointError(
            f"{ckpt_path}: 'iter_num' should be a non-negative integer; found {iter_num!r}", path=ckpt_path
        )
    best = _number(raw.get("best_val_loss"), "best_val_loss", ckpt_path)
    # read_checkpoint moved model_args to "config"; train.py's own config is under "nanogpt_config"
    train_config = raw.get("nanogpt_config") if isinstance(raw.get("nanogpt_config"), dict) else {}
    stdout_log = read_nanogpt_log(log, train_config) if log is not None else None
    if stdout_log is not None and stdout_log.lr_source is None:
        notices.append("the checkpoint's config has no learning_rate: the log's records carry no lr")
    payload = {
        "model_state_dict": model.state_dict(),
        "config": {**cfg.to_dict(), MODEL_CLASS_KEY: MODEL_CLASS},
        "step": iter_num,
        "best_val_loss": best,
        "tokenizer_fingerprint": tok.fingerprint,
        "imported_from": {
            "format": "nanoGPT",
            "checkpoint": str(ckpt_path),
            "data_dir": str(data_dir),
            "config": train_config,
        },
    }
    dtype = id_dtype(tok.vocab_size)
    staged: list[StagedWrite] = []
    with acquire(ws.root, "import") as lock:
        notices += lock.notices
        watched_loop_header(ws, log=log)  # again under the lock: a run may have started meanwhile
        try:
            for split, src in bins.items():
                bin_path = data_dir / f"{split}.bin"
                staged.append(stage_ids(src, ws.ids(split), dtype, tok.vocab_size, bin_path, vocab_of))
            staged.append(stage_in_workspace(tok, ws.tokenizer.parent))
            if stdout_log is not None:
                lines = "".join(json_line(r) + "\n" for r in stdout_log.records)
                staged.append(stage_text(lines, ws.metrics))
            staged.append(stage_torch_save(payload, ws.best_checkpoint))
            # the same file as the latest checkpoint too: `minigpt train --resume` then finds it and
            # refuses it by name (it is no MiniGPT run) instead of reporting no checkpoint at all
            staged.append(stage_same_file(staged[-1], ws.latest_checkpoint))
            # all as one update (the checkpoints last): a crash leaves the workspace as it was or
            # imported whole, never data without its checkpoint (see minigpt.io.commit)
            commit_together(ws.root, staged, command="import", what=f"the nanoGPT run {ckpt_path}")
        finally:
            for write in staged:
                write.discard()  # a no-op for the committed ones
    return ImportSummary(
        checkpoint=str(ckpt_path),
        workspace=str(ws.root),
        written={**{w.path.name: str(w.path) for w in staged}, ws.latest_checkpoint.name: str(ws.latest_checkpoint)},
        step=iter_num,
        best_val_loss=best,
        config=cfg.to_dict(),
        parameters=sum(p.numel() for p in model.parameters()),
        vocab_size=tok.vocab_size,
        fingerprint=tok.fingerprint,
        tokens={split: len(src) for split, src in bins.items()},
        ids_dtype=str(dtype),
        seconds=time.perf_counter() - started,
        notices=notices,
        settings=dict(train_config or {}),
        log_records=len(stdout_log.records) if stdout_log is not None else None,
        tokenizer=tok.describe(),
    )


def _run_tokenizer(
    data_dir: Path, spec: str | os.PathLike | None, model_vocab: int, notices: list[str]
) -> tuple[Tokenizer, str]:
    """The tokenizer the run's IDs were written with, and how messages name it: --tokenizer, else
    meta.pkl, else GPT-2's encoding (stated as the assumption it is)."""
    meta = data_dir / "meta.pkl"
    if spec is not None:
        tok: Tokenizer = load_tokenizer(spec)
        vocab_of = f"--tokenizer {os.fspath(spec)}"
    elif meta.exists():
        tok = CharTokenizer(read_meta(meta), path=str(meta))
        vocab_of = "meta.pkl"
        if tok.vocab_size != model_vocab:
            gpt2 = " (GPT-2's 50257, padded to 50304?)" if model_vocab >= 50257 else ""
            top = _largest_id(data_dir / "train.bin")
            if top is not None and top >= tok.vocab_size:
                gpt2 += f"; train.bin holds IDs up to {top:,}: token files of a larger (BPE?) vocabulary"
            raise DataError(
                f"meta.pkl in {data_dir} has {tok.vocab_size} characters but the checkpoint's vocab_size is "
                f"{model_vocab}{gpt2}",
                path=meta,
                causes=[
                    "--data-dir is another dataset than the one this run trained on",
                    "a char dataset's meta.pkl beside BPE token files: pass --tokenizer tiktoken:gpt2 "
                    "(or the run's tokenizer file)",
                ],
            )
        return tok, vocab_of
    elif model_vocab < GPT2_VOCAB:
        raise DataError(
            f"meta.pkl not found in {data_dir}, and the checkpoint's vocab_size {model_vocab} is smaller than "
            f"GPT-2's {GPT2_VOCAB}, so its IDs are not GPT-2 BPE (what nanoGPT assumes without meta.pkl)",
            path=meta,
            causes=[
                "--data-dir is nanoGPT's data/<dataset> folder: a char dataset keeps its meta.pkl there",
                "a BPE of your own: pass --tokenizer PATH (tokenizer.json, .model or .tiktoken)",
            ],
        )
    else:
        try:
            tok = load_tokenizer(GPT2)
        except TokenizerError as exc:
            raise TokenizerError(
                f"no meta.pkl in {data_dir}, so the IDs are taken as GPT-2 BPE (as nanoGPT's sample.py takes "
                f"them), but {exc.message}",
                causes=exc.causes + ["pass --tokenizer PATH (a .tiktoken, tokenizer.json or .model file)"],
            ) from None
        vocab_of = "GPT-2's encoding"
        notices.append(
            f"no meta.pkl in {data_dir}: the IDs are read as GPT-2 BPE ({GPT2}), as nanoGPT's sample.py "
            "assumes; pass --tokenizer if they were written by another tokenizer"
        )
    if tok.vocab_size > model_vocab:
        raise DataError(
            f"{tok.describe()} has more tokens than the checkpoint's vocab_size {model_vocab}: the model has "
            "no rows for the rest",
            causes=["the tokenizer of another run", "tokens added to the tokenizer after training"],
        )
    if model_vocab > tok.vocab_size:
        notices.append(
            f"the model's vocab_size {model_vocab} pads the tokenizer's {tok.vocab_size} by "
            f"{model_vocab - tok.vocab_size} rows that no ID targets"
        )
    return tok, vocab_of


def _largest_id(path: Path) -> int | None:
    """The largest ID in the first chunk of a token file (None: unreadable; open_bin names why later)."""
    try:
        return int(open_bin(path)[:CHUNK_TOKENS].max())
    except (DataError, OSError, ValueError):
        return None


def _refuse_foreign_ids(tok: Tokenizer, vocab_of: str, train: np.memmap, path: Path) -> None:
    """Refuse, before writing anything, IDs that the tokenizer does not read back: a BPE tokenizer
    given for char IDs decodes them to text that re-encodes to other IDs."""
    sample = torch.from_numpy(np.asarray(train[:FIT_SAMPLE], dtype=np.int64))
    if int(sample.max()) >= tok.vocab_size:
        return  # stage_ids names the first ID beyond the vocabulary
    problems = mismatches(tok, sample, fit(tok, sample))
    if problems:
        looks = ids_look_like(sample)
        raise DataError(
            f"{path} was written by another tokenizer than {vocab_of} ({tok.describe()}): " + "; ".join(problems),
            path=path,
            causes=([f"the IDs look like {looks}"] if looks else [])
            + ["--tokenizer names another run's tokenizer", "pass the tokenizer the dataset's prepare.py used"],
        )
