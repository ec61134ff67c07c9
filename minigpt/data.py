"""Encoded token files and batches of (inputs, targets shifted by one)."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .errors import DataError


def load_ids(path: str | os.PathLike) -> torch.Tensor:
    """Load a 1-D integer tensor of token IDs written by `minigpt prepare` (or the user's code)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"Encoded data not found: {path}", path=path, causes=["run `minigpt prepare` first"])
    if not path.is_file():
        raise DataError(f"Not a data file: {path} is not a regular file", path=path)
    if path.stat().st_size == 0:
        raise DataError(f"Not a token file: {path} is 0 bytes (an interrupted conversion?)", path=path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt pickles/zips
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


def get_batch_loop(data, batch_size, block_size, device="cpu", generator=None):
    """The per-row Python loop `get_batch` replaces; kept for the benchmark only."""
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    x = torch.stack([data[i : i + block_size].long() for i in starts.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + block_size].long() for i in starts.tolist()])
    return x.to(device), y.to(device)
