"""Encoded token files and batches of (inputs, targets shifted by one)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from minigpt.errors import DataError
from minigpt.io.torch_files import TorchFileKind, load_torch_file

ID_DTYPES = (torch.uint8, torch.int16, torch.int32)  # what `prepare` writes, smallest first
TOKEN_FILE = TorchFileKind(
    title="Encoded data file",
    what="token file",
    error=DataError,
    interrupted="an interrupted conversion",
    missing=("run `minigpt prepare` first",),
    unsafe_causes=(
        "the IDs were saved inside a custom class or with numpy objects",
        "re-save them as a plain tensor: torch.save(torch.as_tensor(ids), path)",
        "a file from an untrusted source",
    ),
)


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
    data = load_torch_file(path, TOKEN_FILE)
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
