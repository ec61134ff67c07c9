"""Sizing a MiniGPT from its config before allocating anything: parameter count, a rough peak
memory estimate, the device's memory, and the refusal when the one exceeds the other (a 1 KB
checkpoint claiming 10,000 layers must not allocate gigabytes first).

`--allow-large` (train, check, import) turns the refusal off for the process: `large_allowed()`.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import torch

from minigpt.errors import ResourceError
from minigpt.io.files import describe_size
from minigpt.model.gpt import MiniGPTConfig

FLOAT_BYTES = 4  # float32 weights, gradients, Adam moments and activations
_allow_large = False  # set by --allow-large for the length of one command (large_allowed)


@contextlib.contextmanager
def large_allowed(allow: bool = True) -> Iterator[None]:
    """Within the block, `require_fits` estimates but never refuses (the user said --allow-large).
    Process-wide on purpose: the models are built deep inside the check engine and the importer,
    in worker threads too, where no flag could be threaded through."""
    global _allow_large
    before, _allow_large = _allow_large, allow or _allow_large
    try:
        yield
    finally:
        _allow_large = before


def minigpt_numel(cfg: MiniGPTConfig) -> int:
    """Parameters of `MiniGPT(cfg)`, counted from the config (tied head counted once)."""
    C, E = cfg.embedding_dim, cfg.expansion_factor * cfg.embedding_dim
    block = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (C * E + E) + (E * C + C)  # 2 LayerNorms, attn, MLP
    return cfg.vocab_size * C + cfg.block_size * C + cfg.num_layers * block + 2 * C


def estimate_memory(cfg: MiniGPTConfig, batch_size: int, *, training: bool) -> int:
    """Rough peak bytes: weights (+ gradients and two Adam moments when training) and activations.

    Activations per layer are about 16 floats per token and channel plus the attention matrix
    (SDPA's math path materialises `B x H x T x T`); the logits add `B x T x V` several times.
    An estimate to refuse the absurd before it allocates, not a precise figure.
    """
    B, T, C, L, H = batch_size, cfg.block_size, cfg.embedding_dim, cfg.num_layers, cfg.num_heads
    weights = minigpt_numel(cfg) * FLOAT_BYTES * (4 if training else 1)
    per_layer = B * T * (16 * C + cfg.expansion_factor * C * 2) + 2 * B * H * T * T
    activations = (L if training else 1) * per_layer + 4 * B * T * cfg.vocab_size
    if not training:
        activations += 2 * L * B * T * C  # KV cache
    return weights + activations * FLOAT_BYTES


def device_memory(device: str | torch.device) -> tuple[int | None, str]:
    """Total memory of the device, and where the figure came from (None when unknown)."""
    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return int(props.total_memory), f"{props.name} total memory"
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "total RAM"
    except (ValueError, OSError, AttributeError):
        return None, "unknown"


def require_fits(
    cfg: MiniGPTConfig, device: str | torch.device, *, batch_size: int, training: bool, what: object
) -> int:
    """Raise ResourceError when the estimate exceeds the device's memory; return the estimate."""
    need = estimate_memory(cfg, batch_size, training=training)
    mode = "training" if training else "inference"
    refuse_past_memory(
        need,
        device,
        what,
        f"{minigpt_numel(cfg):,} parameters, {mode} at batch {batch_size}",
        causes=["the config's num_layers / embedding_dim / block_size / vocab_size are far too large"],
    )
    return need


def refuse_past_memory(need: int, device: str | torch.device, what: object, detail: str, *, causes: list[str]) -> None:
    """The one refusal of a model past the device's memory, for minigpt's models and others alike:
    "WHAT would need about N GiB (DETAIL) but the cpu device has M GiB (total RAM)"."""
    have, source = device_memory(device)
    if have is not None and need > have and not _allow_large:
        # a hostile config's count may be past what a float holds (describe_size divides floats)
        size = describe_size(need) if need < 2**80 else f"10**{int(math.log10(need))} bytes"
        raise ResourceError(
            f"{what} would need about {size} ({detail}) but the {torch.device(device).type} "
            f"device has {describe_size(have)} ({source})",
            path=what if isinstance(what, (str, os.PathLike)) else None,
            causes=[*causes, "pass --allow-large to try anyway"],
        )


def large_is_allowed() -> bool:
    """Whether --allow-large is in force (`large_allowed`): estimates that only refuse can be skipped."""
    return _allow_large
