"""Encoded token files and batches of (inputs, targets shifted by one)."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import torch

from minigpt.errors import DataError
from minigpt.io.files import lfs_pointer_message, os_error, read_head, stat_input

ID_DTYPES = (torch.uint8, torch.int16, torch.int32)  # what `prepare` writes, smallest first


def id_dtype(vocab_size: int) -> torch.dtype:
    """The smallest integer dtype that holds IDs 0..vocab_size-1 (uint8, int16 or int32)."""
    for dtype in ID_DTYPES:
        if vocab_size - 1 <= torch.iinfo(dtype).max:
            return dtype
    return torch.int64


def load_ids(path: str | os.PathLike) -> torch.Tensor:
    """Load a 1-D integer tensor of token IDs written by `minigpt prepare` (or the user's code).

    Any integer dtype loads as stored (uint8/int16/int32 from `prepare`, int64 from older
    versions); `get_batch` turns windows into int64.
    """
    path = Path(path)
    st = stat_input(path, "Encoded data file", error=DataError, missing=["run `minigpt prepare` first"])
    if st.st_size == 0:
        raise DataError(f"Not a token file: {path} is 0 bytes (an interrupted conversion?)", path=path)
    lfs = lfs_pointer_message(path, read_head(path), st.st_size)
    if lfs:
        raise DataError(f"Not a token file: {lfs}", path=path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        unsafe = unsafe_globals(path)
        if unsafe:
            raise DataError(
                f"Refused to load {path}: it holds pickled Python objects ({', '.join(unsafe[:5])}), not just "
                "tensors. Unpickling them could run arbitrary code, so minigpt never loads such a file, even "
                "though torch could be told to.",
                path=path,
                causes=[
                    "the IDs were saved inside a custom class or with numpy objects",
                    "re-save them as a plain tensor: torch.save(torch.as_tensor(ids), path)",
                    "a file from an untrusted source",
                ],
            ) from None
        raise DataError(
            f"Not a token file: {path} could not be read: it is not a file written by torch.save",
            path=path,
            causes=["the file is truncated or corrupt", "it was written by something other than torch.save"],
        ) from None
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    except (RuntimeError, EOFError, ValueError, IndexError, KeyError, TypeError, zipfile.BadZipFile) as exc:
        # what torch's readers raise on truncated zips and on bytes that are no pickle
        raise DataError(
            f"Not a token file: {path} could not be read ({type(exc).__name__}: {str(exc)[:200]})",
            path=path,
            causes=["the file is truncated or corrupt", "it was written by something other than torch.save"],
        ) from None
    if not isinstance(data, torch.Tensor):
        raise DataError(f"Not a token file: {path} holds a {type(data).__name__}, expected a 1-D tensor", path=path)
    if data.dim() != 1:
        raise DataError(f"Token file {path} has shape {list(data.shape)}, expected 1-D", path=path)
    if data.dtype.is_floating_point or data.dtype == torch.bool or data.is_complex():
        raise DataError(
            f"Token file {path} has dtype {data.dtype}, expected an integer type",
            path=path,
            causes=["IDs were stored as floats (e.g. via numpy float arrays)"],
        )
    if data.numel() == 0:
        raise DataError(
            f"Token file {path} holds 0 IDs: there is no text to train or check on",
            path=path,
            causes=["the split was empty when it was encoded", "it was written by a script that failed"],
        )
    return data


def unsafe_globals(path: Path) -> list[str]:
    """Names of the pickled classes/functions outside torch's weights-only allow-list (empty when
    the file is not a torch zip at all)."""
    if not zipfile.is_zipfile(path):
        return []
    try:
        return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except (RuntimeError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile):
        return ["<unreadable pickle>"]


def load_split(path: Path, vocab_size: int, block_size: int) -> torch.Tensor:
    """Token IDs checked before training: integer, long enough for one window, all in [0, vocab)."""
    data = load_ids(path)  # 1-D integer tensor or DataError
    if data.numel() < block_size + 1:
        raise DataError(
            f"{path} has {data.numel()} tokens but training needs at least block_size + 1 = {block_size + 1}",
            path=path,
            causes=["the split is empty or too small for this block_size", "the encoded file is truncated"],
        )
    lo, hi = (int(v) for v in torch.aminmax(data))  # one pass for both
    if lo < 0 or hi >= vocab_size:
        bad = ((data < 0) | (data >= vocab_size)).nonzero()
        raise DataError(
            f"{path} holds token IDs outside the vocabulary [0, {vocab_size}): min {lo}, max {hi}, "
            f"{bad.numel()} bad, first at position {int(bad[0])}",
            path=path,
            causes=["the IDs were encoded with another tokenizer", "the tokenizer file was replaced after prepare"],
        )
    return data


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    block_size: int,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows: inputs `data[i:i+T]`, targets `data[i+1:i+T+1]`, both int64 `[B, T]`.

    Built with one gather over an index matrix, not a Python loop per row.
    """
    n = data.numel()
    if n < block_size + 1:
        raise DataError(
            f"data has {n} tokens but a batch needs at least block_size + 1 = {block_size + 1}",
            causes=["the split is too small for this block_size", "the encoded file is truncated"],
        )
    starts = torch.randint(n - block_size, (batch_size,), generator=generator)
    # unfold is a strided view of every window; indexing it copies B rows in one gather
    rows = data.unfold(0, block_size + 1, 1)[starts].long()  # (B, T+1)
    x, y = rows[:, :-1].contiguous(), rows[:, 1:].contiguous()  # user models often call .view(-1)
    if torch.device(device).type == "cuda":
        # pinned memory + non_blocking lets the copy overlap with compute
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)
