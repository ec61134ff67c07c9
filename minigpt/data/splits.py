"""How the train, validation and test splits relate: leakage (validation text that also occurs in
training), identical or nested splits, and characters a split holds that training never shows.

Leakage is measured on WINDOW-token windows drawn at evenly spaced offsets of the held-out split
and searched verbatim in the training IDs (a C `bytes.find`, IDs packed into the smallest
unsigned width; a hit at an offset that is not a multiple of the width is no hit). 64 characters
is long enough that natural text rarely repeats it by chance (a few boilerplate lines such as
headings do), short enough to catch sentences copied between splits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

WINDOW = 64  # tokens per probe window
PROBES = 100  # windows drawn from each held-out split


@dataclass
class Overlap:
    split: str
    identical: bool  # the held-out split equals the training split token for token
    contained: bool  # the whole held-out split occurs inside the training split
    probes: int  # windows searched
    found: int  # windows found verbatim in train
    examples: list[dict] = field(default_factory=list)  # {"offset", "train_offset"} of the first few hits

    @property
    def share(self) -> float:
        return self.found / self.probes if self.probes else 0.0


def _packed(ids: torch.Tensor, vocab_size: int) -> tuple[bytes, int]:
    dtype = np.uint8 if vocab_size <= 1 << 8 else np.uint16 if vocab_size <= 1 << 16 else np.uint32
    arr = ids.detach().cpu().numpy().astype(dtype, copy=False)
    return arr.tobytes(), arr.itemsize


def _find_aligned(hay: bytes, needle: bytes, width: int) -> int:
    """Token offset of `needle` in `hay`, both packed `width` bytes per token; -1 when absent."""
    start = 0
    while True:
        at = hay.find(needle, start)
        if at < 0 or at % width == 0:
            return at // width if at >= 0 else -1
        start = at + 1


def overlap(train: torch.Tensor, held_out: torch.Tensor, vocab_size: int, split: str) -> Overlap:
    train_bytes, width = _packed(train, vocab_size)
    held_bytes, _ = _packed(held_out, vocab_size)
    identical = train_bytes == held_bytes
    n = held_out.numel()
    contained = identical or (
        0 < len(held_bytes) <= len(train_bytes) and _find_aligned(train_bytes, held_bytes, width) >= 0
    )
    if n < WINDOW:
        return Overlap(split, identical, contained, 0, 0)
    count = min(PROBES, n // WINDOW)
    offsets = [round(i * (n - WINDOW) / max(1, count - 1)) for i in range(count)]
    found = 0
    examples: list[dict] = []
    for off in offsets:
        at = _find_aligned(train_bytes, held_bytes[off * width : (off + WINDOW) * width], width)
        if at >= 0:
            found += 1
            if len(examples) < 3:
                examples.append({"offset": off, "train_offset": at})
    return Overlap(split, identical, contained, count, found, examples)


def unseen_characters(train: torch.Tensor, held_out: torch.Tensor, vocab_size: int) -> dict[int, int]:
    """{token id: count in the held-out split} for every ID the training split never holds."""
    in_train = torch.bincount(train.long(), minlength=vocab_size)[:vocab_size] > 0
    counts = torch.bincount(held_out.long(), minlength=vocab_size)[:vocab_size]
    unseen = (~in_train & (counts > 0)).nonzero().flatten().tolist()
    return {i: int(counts[i]) for i in unseen}
