"""nanoGPT's training log: what its `train.py` prints to stdout, as minigpt's metrics records.

nanoGPT writes no log file; people keep its stdout (`python train.py ... | tee train.log`). Two
kinds of lines carry numbers (karpathy/nanoGPT train.py):

    step 250: train loss 1.9705, val loss 2.0689          (estimate_loss, every eval_interval)
    iter 250: loss 1.9901, time 31.52ms, mfu 4.32%        (every log_interval)

Both for the same N become one record `{"step": N, "train_loss", "val_loss", "eval_train_loss"}`
(the printed iteration loss is the train loss; the eval's train loss is kept apart, as minigpt's
trainer writes it). nanoGPT never prints its learning rate: when the run's settings are known
(its checkpoint's `config`), each record gets the rate nanoGPT's `get_lr` gave that iteration.
Every other line (config dumps, "saving checkpoint to ...") is ignored and counted.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from minigpt.errors import DataError
from minigpt.io.files import stat_input
from minigpt.logs.record import MetricsRecord

_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf)"
ITER_LINE = re.compile(rf"^iter (\d+): loss {_NUM}(?:, time {_NUM}ms)?(?:, mfu {_NUM}%)?", re.IGNORECASE)
EVAL_LINE = re.compile(rf"^step (\d+): train loss {_NUM}, val loss {_NUM}", re.IGNORECASE)
MAX_LOG_BYTES = 2 * 2**30  # a stdout log of a very long run is tens of MB


@dataclass
class NanoGPTLog:
    """The records read from one nanoGPT stdout log."""

    path: str
    records: list[MetricsRecord] = field(default_factory=list)
    iter_lines: int = 0
    eval_lines: int = 0
    other_lines: int = 0
    lr_source: str | None = None  # where the learning rates came from, or None when unknown


def nanogpt_lr(it: int, config: dict) -> float | None:
    """nanoGPT's `get_lr(it)` (linear warm-up, cosine decay to min_lr) from its train.py settings;
    None when the settings lack the learning rate."""
    lr = _float(config.get("learning_rate"))
    if lr is None:
        return None
    if config.get("decay_lr") is False:
        return lr
    warmup = int(_float(config.get("warmup_iters")) or 0)
    decay_iters = int(_float(config.get("lr_decay_iters")) or 0)
    min_lr = _float(config.get("min_lr"))
    min_lr = lr / 10 if min_lr is None else min_lr
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it > decay_iters or decay_iters <= warmup:
        return min_lr
    ratio = (it - warmup) / (decay_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_nanogpt_log(path: str | os.PathLike, config: dict | None = None) -> NanoGPTLog:
    """Parse nanoGPT's stdout log at `path`. `config` (the checkpoint's train.py settings) gives
    each record its learning rate. Raises DataError when the file holds no nanoGPT line."""
    path = Path(path).expanduser()
    st = stat_input(path, "nanoGPT log", error=DataError, missing=["--log is the file nanoGPT's stdout went to"])
    if st.st_size > MAX_LOG_BYTES:
        raise DataError(f"{path} is {st.st_size:,} bytes: not a nanoGPT stdout log", path=path)
    log = NanoGPTLog(str(path))
    by_step: dict[int, MetricsRecord] = {}
    order: list[MetricsRecord] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.strip().rsplit("\r", 1)[-1]  # a progress bar's carriage returns: the last part
            fields: MetricsRecord
            if m := ITER_LINE.match(line):
                step = int(m.group(1))
                fields = {"step": step, "train_loss": float(m.group(2))}
                if m.group(3) is not None:
                    fields["iter_ms"] = float(m.group(3))
                log.iter_lines += 1
            elif m := EVAL_LINE.match(line):
                step = int(m.group(1))
                fields = {"step": step, "eval_train_loss": float(m.group(2)), "val_loss": float(m.group(3))}
                log.eval_lines += 1
            else:
                log.other_lines += int(bool(line))
                continue
            record = by_step.get(step)
            repeated = record is not None and any(k in record for k in fields if k != "step")
            if record is None or repeated:  # a new step, or a resumed run's repeat of one
                by_step[step] = fields
                order.append(fields)
            else:
                record.update(fields)
    if not order:
        raise DataError(
            f"No nanoGPT log lines in {path}: expected lines like 'iter 10: loss 2.5, time 30.1ms, mfu 4.2%' "
            "or 'step 250: train loss 1.97, val loss 2.07'",
            path=path,
            causes=["the file is another program's output", "stdout was not saved (python train.py | tee train.log)"],
        )
    if config is not None and nanogpt_lr(0, config) is not None:
        for record in order:
            lr = nanogpt_lr(record["step"], config)
            if lr is not None:  # the settings give one at every step once they give one at 0
                record["lr"] = lr
        log.lr_source = "the checkpoint's settings (nanoGPT's get_lr)"
    log.records = order
    return log
