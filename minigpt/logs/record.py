"""One line of `logs/metrics.jsonl` as every writer writes it: `minigpt train`, the loop watch
(`minigpt.watch` and its Hugging Face / Lightning callbacks) and `minigpt import nanogpt --log`.
`MetricsRecord` is the schema, here and only here; `minigpt.logs.metrics` reads it back.

A line is compact JSON (no spaces), one object. Writers put floats in, non-finite ones included:
the line holds those as the strings "nan", "inf", "-inf", since JSON has no such numbers (the
reader takes them, and bare literals from other tools, as numbers). A field not measured is left
out, never written as null.

Adding a field: one line in `MetricsRecord` (with its comment), one in the reader's
`minigpt.logs.metrics`, one in the docs' schema table; the writer that measures it sets it.
Pure Python (no torch): the watch writes a line per step inside the user's loop.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import IO, Any, TypedDict

from minigpt.io.files import named


class _Step(TypedDict):
    step: int  # optimizer steps done (the step this line describes)


class MetricsRecord(_Step, total=False):
    train_loss: float  # mean training loss of this step's micro-batches
    loss_source: str  # where the watch read train_loss: "model", "model x F", "logits sample (backward hook)"
    logged_loss: float  # a loss the loop logged itself (watch.log(loss=...)) beside the model's own
    mean_train_loss: float  # a library's end-of-training mean over the whole run (Hugging Face's Trainer)
    val_loss: float  # at evaluations: mean loss on the validation split, in eval mode
    eval_train_loss: float  # at evaluations: the same measurement on the training split
    lr: float  # learning rate of the step (the first parameter group's)
    lrs: list[float | None]  # every group's learning rate, when there are several
    grad_norm: float  # global gradient norm before clipping
    grad_norm_after_clip: float  # the norm the optimizer step saw (the watch's full readings)
    nonfinite: bool  # true on the line of the step whose loss, gradients or weights went non-finite
    skipped: bool  # a float16 overflow: the gradient scaler skipped this update
    tokens: int  # tokens in this step (all micro-batches)
    tokens_per_s: float  # training throughput of this step (all ranks)
    iter_ms: float  # milliseconds the step took, as the loop printed it (nanoGPT's `time`)
    elapsed_s: float  # seconds since the run (or the resume, or the watch) started
    time: float  # Unix wall time of the line
    world_size: int  # processes training together (torchrun)
    memory_bytes: int  # memory in use at a full reading
    memory_source: str  # what memory_bytes counts: "cuda_allocated" or "rss"


FIELDS = tuple(MetricsRecord.__annotations__)  # every field, in the schema's order

_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder object (json.dumps makes one a call)
_encode_strict = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # raises on NaN/Infinity


def write_metrics(log: IO[str], record: MetricsRecord, *, sync: bool = False) -> None:
    """Append `record`'s line to the open log and flush it (the UI follows the file as it grows);
    `sync` also fsyncs it: a line that must be on disk before the checkpoint it describes."""
    log.write(json_line(record) + "\n")
    log.flush()
    if sync:
        try:
            os.fsync(log.fileno())
        except OSError as exc:
            raise named(exc, getattr(log, "name", None)) from None


def line_template(*fields: str) -> str:
    """A `%`-format of a metrics line with exactly `fields`, in that order, each filled with a value
    already in its JSON text (`str` of an int or of a finite float, a string encoded by
    `compact_json`): a writer's per-step line without the encoder's cost. Its output equals
    `json_line` of the same record, which a test holds."""
    unknown = [f for f in fields if f not in FIELDS]
    if unknown:
        raise ValueError(f"not fields of MetricsRecord: {unknown}")
    return "{" + ",".join(f'"{f}":%s' for f in fields) + "}"


compact_json = _encode  # JSON without spaces, NaN/Infinity as bare literals (a string: quoted and escaped)


def json_line(record: Mapping[str, object]) -> str:
    """Compact JSON of `record` with non-finite numbers as strings (any JSONL log the readers follow:
    metrics, gradients). Almost every record has none, and the strict encoder finds that without
    copying the record first."""
    try:
        return _encode_strict(record)
    except ValueError:
        return _encode(_finite(record))


def _finite(value: Any) -> Any:
    if isinstance(value, float):  # numpy's float64 too (a value given to watch.log)
        return value if math.isfinite(value) else str(value)
    kind = type(value)  # the records' own dicts and lists
    if kind is dict or isinstance(value, Mapping):
        return {k: _finite(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [_finite(v) for v in value]
    return value
