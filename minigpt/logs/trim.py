"""Cutting a JSONL log back to a step (what `minigpt train --resume` does to the interrupted run's
`metrics.jsonl` and `grads.jsonl`), streamed: memory stays bounded and time linear whatever the
log's size, and nothing is deleted. Pure Python (no torch).

Lines whose `step` is at most the resumed step are kept; later ones are dropped (the resumed run
logs them again); lines that cannot be read (bad UTF-8, not JSON, nested too deeply, a `step` that
is not a finite number) move to `<log>.rejected`, also when they are longer than `MAX_LINE_BYTES`
(copied there as they stream, never held whole). The log is replaced (atomically) only when a line
was dropped, moved or given its missing newline.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from itertools import repeat
from pathlib import Path
from typing import IO

from minigpt.io.atomic import staged_open
from minigpt.io.files import open_log, open_regular, os_error

READ_BLOCK = 1 << 22
MAX_LINE_BYTES = 16 << 20  # a grads.jsonl line of a large model is ~100 KB
_BATCH = 4096  # lines parsed with one json.loads


def step_of(line: bytes) -> float | None:
    """The `step` of a log line (0 when absent, as other tools' headers), or None when unreadable."""
    if not line.strip():
        return 0
    try:
        record = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return _record_step(record)


def _record_step(record: object) -> float | None:
    if not isinstance(record, dict):
        return None
    value = record.get("step", 0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def _plain_steps(lines: list[bytes]) -> list[int] | None:
    """The hot path: every line a JSON object with an int `step` (what minigpt writes), read in one
    json.loads and a few C-level passes; None otherwise (then `_steps_of` decides line by line)."""
    try:
        records = json.loads(b"[" + b",".join(lines) + b"]")
        b"".join(lines).decode("utf-8")  # strict: json.loads of bytes also takes UTF-16/32
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if len(records) != len(lines) or set(map(type, records)) != {dict}:
        return None
    steps: list = list(map(dict.get, records, repeat("step")))
    return steps if set(map(type, steps)) == {int} else None


def _steps_of(lines: list[bytes]) -> list[float | None]:
    """`step_of` for each line, in one json.loads for the common case (every line one JSON value)."""
    if all(line.strip() for line in lines):
        try:
            records = json.loads(b"[" + b",".join(lines) + b"]")
            if len(records) == len(lines):
                b"".join(lines).decode("utf-8")  # strict: json.loads of bytes also takes UTF-16/32
                return [_record_step(r) for r in records]
        except (UnicodeDecodeError, ValueError, RecursionError):
            pass
    return [step_of(line) for line in lines]


class _Aside:
    """`<log>.rejected`, opened (for appending, never through a link) on the first line moved."""

    def __init__(self, path: Path):
        self.path = path
        self.fh: IO[bytes] | None = None
        self.lines = 0

    def write(self, data: bytes) -> None:
        if self.fh is None:
            self.fh = open_log(self.path, "ab", what="the rejected-lines file")
        self.fh.write(data)

    def close(self) -> None:
        if self.fh is not None:
            self.fh.close()


def _lines(fh: IO[bytes], aside: _Aside) -> Iterator[bytes]:
    """Complete lines of `fh` (a missing last newline added); a line over MAX_LINE_BYTES is copied
    to `aside` as it streams instead of being yielded."""
    buf, overlong = b"", False
    while block := fh.read(READ_BLOCK):
        start = 0
        while True:
            nl = block.find(b"\n", start)
            piece = block[start:] if nl < 0 else block[start : nl + 1]
            if overlong:
                aside.write(piece)
            elif len(buf) + len(piece) > MAX_LINE_BYTES:
                aside.write(buf + piece)
                buf, overlong = b"", True
            elif nl >= 0:
                yield buf + piece
                buf = b""
            else:
                buf += piece
            if nl < 0:
                break
            if overlong:
                overlong = False
                aside.lines += 1
            start = nl + 1
    if overlong:
        aside.write(b"\n")
        aside.lines += 1
    elif buf:
        yield buf + b"\n"


def trim_log(path: str | os.PathLike, step: int) -> tuple[int, Path]:
    """Keep the lines of `path` up to `step` (see the module docstring); return how many lines
    moved to the rejected file, and its path. `path` must be a regular file (a link or a FIFO is
    refused: UnsafePathError)."""
    path = Path(path)
    aside = _Aside(path.with_name(path.name + ".rejected"))
    fd = open_regular(path, os.O_RDONLY, what="the log", action="read")
    changed = False
    try:
        with os.fdopen(fd, "rb") as src, staged_open(path, "wb") as staged:
            batch: list[bytes] = []

            def flush() -> bool:
                plain = _plain_steps(batch) if batch else None
                if plain is not None and max(plain) <= step:  # the common case: keep the whole batch
                    staged.fh.write(b"".join(batch))
                    batch.clear()
                    return False
                dropped = False
                for line, line_step in zip(batch, _steps_of(batch)):
                    if line_step is None:
                        aside.write(line)
                        aside.lines += 1
                        dropped = True
                    elif line_step <= step:
                        staged.fh.write(line)
                    else:
                        dropped = True
                batch.clear()
                return dropped

            size = os.fstat(src.fileno()).st_size
            for line in _lines(src, aside):
                batch.append(line)
                if len(batch) >= _BATCH:
                    changed |= flush()
            changed |= flush()
            changed |= aside.lines > 0 or staged.fh.tell() != size  # a newline added at the end
        if changed:
            staged.commit()
        else:
            staged.discard()
    except OSError as exc:
        raise os_error(exc, path) from None
    finally:
        aside.close()
    return aside.lines, aside.path
