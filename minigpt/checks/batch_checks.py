"""Checks on the batches the checks train with: targets shifted by one, int64 [B, T] on the model's
device. The batch shape every model check uses is set here."""

from __future__ import annotations

import torch

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status

DEBUG_BATCH_SIZE = 8  # rows per batch in the batch and model checks


def block_size(ctx: CheckContext) -> int:
    """The context length of the model the checks build (its config's, else 32)."""
    from minigpt.model.contract import config_lookup

    value = config_lookup(ctx.base_config(), "block_size")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 32


def model_vocab(ctx: CheckContext) -> int:
    """How many logits the model gives each position: the tokenizer's size, or the config's
    vocab_size where that is larger (a vocabulary padded to a round number, as nanoGPT pads GPT-2's
    50257 to 50304; the rows past the tokenizer are never targets)."""
    from minigpt.model.contract import config_lookup

    vocab = ctx.tokenizer.vocab_size
    declared = config_lookup(ctx.base_config(), "vocab_size")
    if isinstance(declared, int) and not isinstance(declared, bool) and declared > vocab:
        return declared
    return vocab


def check_shape(ctx: CheckContext) -> tuple[int, int, int]:
    """(B, T, V) of the model checks' batches: T is kept apart from V so [B, T, V] and [B, V, T] differ."""
    vocab = model_vocab(ctx)
    T = block_size(ctx)
    if T == vocab:  # [B, T, V] and [B, V, T] would look alike
        T -= 1
    return DEBUG_BATCH_SIZE, T, vocab


@check("batch_shift", "batches", "Targets are the inputs shifted by one", depends=("token_range",))
def batch_shift(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    x, y = ctx.batch(DEBUG_BATCH_SIZE, block_size(ctx))
    shifted_ok = bool(torch.equal(x[:, 1:], y[:, :-1]))
    identical = bool(torch.equal(x, y))
    tok = ctx.tokenizer
    values = {
        "shape": list(x.shape),
        "shift_invariant": shifted_ok,
        "targets_equal_inputs": identical,
        "input_row0": tok.decode(x[0].tolist()),
        "target_row0": tok.decode(y[0].tolist()),
    }
    if identical or not shifted_ok:
        what = "targets equal inputs" if identical else "inputs[:, 1:] != targets[:, :-1]"
        mismatch = (x[:, 1:] != y[:, :-1]).nonzero()
        values["first_mismatch"] = mismatch[0].tolist() if len(mismatch) else None
        raise Outcome(
            Status.FAIL,
            f"{what}: the model would learn to copy, not to predict the next token",
            values=values,
            causes=[
                "targets built as data[i:i+T] instead of data[i+1:i+T+1]",
                "the shift applied twice (in the batch and again in the loss)",
            ],
            fixes=["y = data[i + 1 : i + 1 + block_size]", "check get_batch against inputs[:, 1:] == targets[:, :-1]"],
        )
    return f"inputs[:, 1:] == targets[:, :-1] on a {x.shape[0]}x{x.shape[1]} batch", values


@check("batch_dtype_device", "batches", "Batches are int64 [B, T] on the model's device", depends=("batch_shift",))
def batch_dtype_device(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    x, y = ctx.batch(DEBUG_BATCH_SIZE, block_size(ctx))
    model = ctx.build_model()
    model_device = next(model.parameters()).device
    values = {
        "inputs": {"dtype": str(x.dtype), "shape": list(x.shape), "device": str(x.device)},
        "targets": {"dtype": str(y.dtype), "shape": list(y.shape), "device": str(y.device)},
        "model_device": str(model_device),
    }
    problems = []
    for name, t in (("inputs", x), ("targets", y)):
        if t.dtype != torch.long:
            problems.append(f"{name} dtype {t.dtype}, expected torch.int64")
        if t.dim() != 2:
            problems.append(f"{name} shape {list(t.shape)}, expected [B, T]")
        if t.device != model_device:
            problems.append(f"{name} on {t.device}, model on {model_device}")
    if problems:
        raise Outcome(
            Status.FAIL,
            "; ".join(problems),
            values=values,
            causes=["IDs stored as int32/uint8 and not cast", "batch not moved with .to(device)"],
            fixes=["x = x.long().to(device)"],
        )
    return f"int64 {list(x.shape)} on {model_device}", values
