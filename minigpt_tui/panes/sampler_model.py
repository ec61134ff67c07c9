"""The model the sampler pane generates with, loaded on its worker thread from the checks' context
and kept until that context is rebuilt: the model, its tokenizer, which model it is (a checkpoint's
label, or a fresh model's warning), the end-of-text token where the run's data holds it, and the
tokenizer's size where the model's vocabulary is padded past it. Torch is imported only when a
model loads (never on first paint)."""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from minigpt.data.tokenizer_api import Tokenizer


class SamplerModel(NamedTuple):
    model: Any  # the torch module (torch is not imported here)
    tokenizer: Tokenizer
    note: str  # the checkpoint's label, or FRESH MODEL with why its output is noise
    eot: int | None  # a sample stops at this token (None: the run's train IDs never hold it)
    vocab_limit: int | None  # the tokenizer's size where the model's vocabulary is padded past it


class ModelCache:
    """One model per checks context: a rebuilt context (new options, a new checkpoint) loads again."""

    def __init__(self) -> None:
        self._cached: tuple[object, SamplerModel] | None = None  # (context, what it gave)
        self._lock = threading.Lock()  # two runs in a row load once

    def load(self, ctx) -> SamplerModel:
        """The sampler's model from `ctx` (worker thread); CheckpointError when it does not load or
        is not finite."""
        with self._lock:
            if self._cached is None or self._cached[0] is not ctx:
                from minigpt.checks.result import Outcome
                from minigpt.errors import CheckpointError

                try:
                    inspected = ctx.inspected_model(require_finite=True)
                except Outcome as out:  # the checkpoint does not load or is not finite
                    raise CheckpointError(out.summary.replace("skipped: ", "cannot sample: ")) from None
                note = (
                    inspected.label
                    if inspected.source == "checkpoint"
                    else f"FRESH MODEL ({inspected.label}; untrained output is noise)"
                )
                tok = ctx.tokenizer
                self._cached = (ctx, SamplerModel(inspected.model, tok, note, *_run_tokens(ctx, tok)))
            return self._cached[1]


def _run_tokens(ctx, tok: Tokenizer) -> tuple[int | None, int | None]:
    """(the EOT token where the run's train IDs hold it, the tokenizer's size where the model's
    vocabulary is padded past it). Worker thread: reads the splits and the config."""
    from minigpt.checks.batch_checks import model_vocab
    from minigpt.data.tokenizer_fit import count
    from minigpt.errors import MiniGPTError

    eot = tok.eot_id
    try:
        if eot is not None and not count(ctx.splits["train"], eot):
            eot = None  # the run never saw it: nothing says where a text ends
        padded = model_vocab(ctx) > tok.vocab_size
    except MiniGPTError:
        return eot, None
    return eot, tok.vocab_size if padded else None
