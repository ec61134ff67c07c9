"""Metrics logs: read `logs/metrics.jsonl` into compact columns (`read_metrics`) or stream its
records a block at a time (`scan_metrics`: what `minigpt.logs.curve_sample` keeps a bounded sample
of), and downsample a series for a plot (following it while training writes is
`minigpt.logs.follow`). Pure Python (no torch, rich or textual): the TUI imports it on first paint.

One JSON object per line. Key aliases: `step`/`iter`/`iteration`; `train_loss`/`loss`;
`val_loss`/`val`/`valid_loss`/`eval_loss`/`validation_loss`; `lr`/`learning_rate`. Non-finite
numbers may be strings ("nan", "inf", "-inf", as `minigpt.train.trainer` writes them) or bare
NaN/Infinity literals. Blank lines are skipped; other unparseable lines are counted as bad. A last
line without a newline that does not parse is a write in progress, not a bad line.

Points are kept as written, one per line; several lines may share a step (a train line, then an
evaluation line, then a loop's end-of-training summary). `merge_steps` makes one point per step, a
later line adding fields and never erasing one.
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Protocol, overload

from minigpt.errors import DataError
from minigpt.io.files import os_error, stat_input

MAX_BAD_LINE_NUMBERS = 10

_ALIASES = {
    "step": ("step", "iter", "iteration"),
    "train_loss": ("train_loss", "loss"),
    "val_loss": ("val_loss", "val", "valid_loss", "eval_loss", "validation_loss"),
    "lr": ("lr", "learning_rate"),
    "grad_norm": ("grad_norm", "gradient_norm"),
    "tokens_per_s": ("tokens_per_s", "tokens_per_sec"),
    "elapsed_s": ("elapsed_s", "elapsed"),
}


@dataclass(slots=True)
class MetricPoint:
    step: int
    train_loss: float | None = None
    val_loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    tokens_per_s: float | None = None
    elapsed_s: float | None = None


_FIELDS = tuple(_ALIASES)[1:]  # MetricPoint's fields after step
_STEP_RANGE = range(-(2**63), 2**63)  # what the step column (a C int64) holds
_FLOAT, _FLOAT_OR_NONE = {float}, {float, type(None)}
Values = tuple  # (step, train_loss, val_loss, lr, grad_norm, tokens_per_s, elapsed_s)


class MetricPoints(Sequence[MetricPoint]):
    """The points of a metrics log stored column-wise: 57 bytes a point (int64 step, a float64
    per field, a presence bitmask) instead of ~300 for objects, so a million-line log fits in
    tens of MB. Indexing and iteration build `MetricPoint`s on the fly, so `p.step`,
    `p.train_loss`... read as before; `series` reads one column without building any."""

    __slots__ = ("_steps", "_columns", "_present")

    def __init__(self, points: Iterable[MetricPoint] = ()):
        self._steps = array("q")
        self._columns = tuple(array("d") for _ in _FIELDS)
        self._present = tuple(bytearray() for _ in _FIELDS)  # 1 where the field is present, 0 for None
        for p in points:
            self.append(p)

    def append_values(self, step: int, values: Sequence[float | None]) -> None:
        self.extend_rows([(step, *values)])

    def extend_rows(self, rows: list[Values]) -> None:
        """Append rows of (step, *raw values); a raw value that is not a float or None goes
        through `_number` (ints, "nan" strings; a bool is absent). Column-wise: the common case
        (a column of floats) is one C-level extend, not a Python loop."""
        if rows:
            steps, *columns = zip(*rows)
            self.extend_columns(steps, columns)

    def extend_columns(self, steps: Sequence[int], columns: Sequence[Sequence]) -> None:
        """Append whole columns: `steps` (ints) and one sequence of raw values per field."""
        self._steps.extend(steps)
        for column, present, col in zip(self._columns, self._present, columns):
            kinds = set(map(type, col))
            if kinds == _FLOAT:
                column.extend(col)
                present.extend(b"\x01" * len(col))
                continue
            if not kinds <= _FLOAT_OR_NONE:
                col = [v if v is None or type(v) is float else _number(v) for v in col]
            column.extend([0.0 if v is None else v for v in col])
            present.extend(bytes([v is not None for v in col]))

    def append(self, point: MetricPoint) -> None:
        self.append_values(point.step, [getattr(point, name) for name in _FIELDS])

    def __len__(self) -> int:
        return len(self._steps)

    def _point(self, i: int) -> MetricPoint:
        return MetricPoint(self._steps[i], *[c[i] if p[i] else None for c, p in zip(self._columns, self._present)])

    @overload
    def __getitem__(self, index: int) -> MetricPoint: ...
    @overload
    def __getitem__(self, index: slice) -> list[MetricPoint]: ...
    def __getitem__(self, index: int | slice) -> MetricPoint | list[MetricPoint]:
        if isinstance(index, slice):
            return [self._point(i) for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("metric point index out of range")
        return self._point(index)

    def __iter__(self) -> Iterator[MetricPoint]:
        return (self._point(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"MetricPoints({len(self)} points)"

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one field where it is present, straight from the columns."""
        k = _FIELDS.index(name)
        column, present, steps = self._columns[k], self._present[k], self._steps
        if present.count(0) == 0:
            return list(steps), list(column)
        keep = [i for i, p in enumerate(present) if p]
        return [steps[i] for i in keep], [column[i] for i in keep]


@dataclass
class MetricsLog:
    path: str
    points: MetricPoints  # a Sequence[MetricPoint]
    bad_lines: int = 0  # non-blank lines that are not a metrics record
    bad_line_numbers: list[int] = field(default_factory=list)  # 1-based, first few
    partial_tail: bool = False  # the last line is still being written
    notes: list[str] = field(default_factory=list)  # how the log was read, for the verdict (which run, tags)
    records: int | None = None  # records read, when `points` is a bounded sample of them (curve_sample)


def _number(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):  # True is no loss
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())  # accepts "nan", "inf", "-inf", "Infinity", "1e-3"
        except ValueError:
            return None
    return None


_FIELD_OF = {key: name for name, keys in _ALIASES.items() for key in keys}
_PRIORITY = {key: rank for keys in _ALIASES.values() for rank, key in enumerate(keys)}


def parse_line(line: str | bytes) -> MetricPoint | None:
    """One metrics line -> MetricPoint; None for blank lines, bad JSON, or a record without a step."""
    values = _line_values(line)
    return None if values is None else MetricPoint(*values)


def _line_values(line: str | bytes) -> Values | None:
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: brackets nested thousands deep
        return None
    return _values(record)


def parse_values(lines: list[bytes], block: int = 4096, *, raw: bool = False) -> list[Values | None]:
    """Parse many lines into value tuples, aligned with `lines`: one `json.loads` per block of
    lines when each non-blank line in it is one JSON value (about 2.5x faster than a loads per
    line on a million lines); a block holding a bad line is parsed line by line. `raw`: leave
    values that are not floats for `MetricPoints.extend_rows` to convert."""
    if len(lines) > block:
        return [
            v
            for start in range(0, len(lines), block)
            for v in parse_values(lines[start : start + block], block, raw=raw)
        ]
    convert = _raw_values if raw else _values
    try:  # the common case: no blank line, every line one JSON value
        records = json.loads(b"[" + b",".join(lines) + b"]")
        if len(records) == len(lines):
            return [convert(r) for r in records]
    except (ValueError, RecursionError):
        pass
    nonblank = [i for i, line in enumerate(lines) if line.strip()]
    out: list[Values | None] = [None] * len(lines)
    try:
        records = json.loads(b"[" + b",".join(lines[i] for i in nonblank) + b"]")
    except (ValueError, RecursionError):
        records = None
    if records is not None and len(records) == len(nonblank):
        for i, record in zip(nonblank, records):
            out[i] = convert(record)
    else:
        for i in nonblank:
            values = _line_values(lines[i])
            out[i] = values
    return out


# records with only these keys (what minigpt.train.trainer writes) skip the alias resolution
_PLAIN_KEYS = frozenset(_ALIASES) | {"time", "eval_train_loss", "nonfinite"}


def _values(record: object) -> Values | None:
    values = _raw_values(record)
    if values is None:
        return None
    return (values[0], *[v if v is None or type(v) is float else _number(v) for v in values[1:]])


def _raw_values(record: object) -> Values | None:
    """(step, *values) of a record; values that are not floats are left for `_number`."""
    if not isinstance(record, dict):
        return None
    if record.keys() <= _PLAIN_KEYS:
        step = record.get("step")
        if type(step) is not int:
            step = _number(step)
            if step is None or not math.isfinite(step):
                return None
            step = int(step)
        if step not in _STEP_RANGE:
            return None
        return (step, *map(record.get, _FIELDS))
    found: dict[str, float | None] = {}
    rank: dict[str, int] = {}
    for key, value in record.items():  # one pass over the record (hot path: a million lines)
        name = _FIELD_OF.get(key)
        if name is not None and (name not in rank or _PRIORITY[key] < rank[name]):
            found[name] = value
            rank[name] = _PRIORITY[key]
    step = found.pop("step", None)
    step = step if type(step) is int else _number(step)
    if step is None or not math.isfinite(step) or int(step) not in _STEP_RANGE:
        return None
    return (int(step), *[found.get(name) for name in _FIELDS])


READ_BLOCK = 1 << 22  # bytes read at a time: memory stays bounded whatever the log's size
MAX_LINE_BYTES = 1 << 20  # a metrics record is ~200 bytes: a longer line is bad, skipped unparsed
OVERLONG_LINE = b"\x00(a line longer than the cap, skipped)"  # stands for it: never parses


class LineSplitter:
    """Bytes in, complete lines out, in time linear in the bytes: a line longer than `max_line`
    is never accumulated (a 2 GB file without a newline must not be copied block after block);
    it comes out as `OVERLONG_LINE` once its newline arrives, and the bytes up to it are dropped."""

    def __init__(self, max_line: int = MAX_LINE_BYTES):
        self.max_line = max_line
        self.tail = b""  # the partial last line (at most max_line bytes)
        self.skipping = False  # inside an over-long line, waiting for its newline

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return out
            data, self.skipping = data[nl + 1 :], False
            out.append(OVERLONG_LINE)
        lines = (self.tail + data).split(b"\n")
        self.tail = lines.pop()  # b"" when data ended with a newline, else a partial line
        if len(self.tail) > self.max_line:
            self.tail, self.skipping = b"", True
        cap = self.max_line
        out += [OVERLONG_LINE if len(line) > cap else line for line in lines]
        return out

    def reset(self) -> None:
        self.tail, self.skipping = b"", False


def read_metrics(path: str | os.PathLike) -> MetricsLog:
    """Read a whole metrics file in blocks into a compact `MetricPoints`, one point per record, in
    linear time (a line over `MAX_LINE_BYTES` is a bad line, never buffered whole). Its memory grows
    with the file: a check reads a bounded sample instead (`minigpt.logs.curve_sample`).

    Raises DataError when it is missing, not a regular file or unreadable (FileSystemError for
    permission problems).
    """
    log = MetricsLog(path=str(path), points=MetricPoints())
    scan_metrics(path, log, log.points.extend_columns)
    return log


Columns = Callable[[Sequence[int], Sequence[Sequence]], None]  # (steps, one raw column per field)


def scan_metrics(path: str | os.PathLike, log: MetricsLog, add: Columns) -> None:
    """Stream the records of the metrics file at `path` to `add`, a block at a time: the step
    column and one column of raw values per field of `MetricPoint` after `step`, as
    `MetricPoints.extend_columns` takes them (`number_column` makes a column floats). Bad lines
    and a last line still being written are counted into `log`. Memory holds one block (a few MB),
    whatever the file's length; raises as `read_metrics` does."""
    path = Path(path)
    stat_input(
        path,
        "Metrics log",
        error=DataError,
        missing=["training has not started in this workspace", "wrong workspace folder"],
    )
    lineno, splitter = 0, LineSplitter()
    try:
        with open(path, "rb") as fh:
            while block := fh.read(READ_BLOCK):
                lines = splitter.feed(block)
                for start in range(0, len(lines), _LINES_PER_PARSE):
                    _read_lines(log, lines[start : start + _LINES_PER_PARSE], lineno + start, add)
                lineno += len(lines)
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    if splitter.skipping:  # an over-long last line without its newline: no record is that long
        count_bad(log, lineno + 1)
    elif splitter.tail.strip():  # a last line without its newline: complete JSON, or a write in progress
        values = _line_values(splitter.tail)
        if values is not None:
            add([values[0]], [[v] for v in values[1:]])
        else:
            log.partial_tail = True


_LINES_PER_PARSE = 4096


def _read_lines(log: MetricsLog, lines: list[bytes], lineno: int, add: Columns) -> None:
    """Parse `lines` (numbered from `lineno` + 1) and hand their columns to `add`."""
    columns = _plain_columns(lines)
    if columns is not None:
        add(*columns)
        return
    rows = parse_values(lines, raw=True)
    for i, (line, values) in enumerate(zip(lines, rows), start=lineno + 1):
        if values is None and line.strip():
            count_bad(log, i)
    kept = [v for v in rows if v is not None]
    if kept:
        steps, *cols = zip(*kept)
        add(steps, cols)


def number_column(column: Sequence) -> list[float | None]:
    """A column of raw values as floats, None where a value is absent or not a number (as
    `MetricPoints.extend_columns` stores it)."""
    if set(map(type, column)) <= _FLOAT_OR_NONE:
        return list(column)
    return [v if v is None or type(v) is float else _number(v) for v in column]


def _plain_columns(lines: list[bytes]) -> tuple[list[int], list[list]] | None:
    """The hot path: when every line is a record with only the keys `minigpt.train.trainer` writes and
    an int step, the step column and one raw column per field, extracted column by column
    (about 3x faster than a tuple per record); None otherwise (then `parse_values` decides)."""
    try:
        records = json.loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, RecursionError):
        return None
    if not records or len(records) != len(lines) or set(map(type, records)) != {dict}:
        return None
    if not set().union(*records) <= _PLAIN_KEYS:  # every key of every record, in one C call
        return None
    steps: list = list(map(dict.get, records, repeat("step")))
    if set(map(type, steps)) != {int} or min(steps) not in _STEP_RANGE or max(steps) not in _STEP_RANGE:
        return None
    return steps, [list(map(dict.get, records, repeat(name))) for name in _FIELDS]


class CountsBadLines(Protocol):
    """What counts unreadable lines: a `MetricsLog`, or a follower of a growing log."""

    bad_lines: int
    bad_line_numbers: list[int]


def count_bad(log: CountsBadLines, lineno: int) -> None:
    """Count a line that is not a record (its number kept, the first few)."""
    log.bad_lines += 1
    if len(log.bad_line_numbers) < MAX_BAD_LINE_NUMBERS:
        log.bad_line_numbers.append(lineno)


def merge_steps(points: Iterable[MetricPoint]) -> list[MetricPoint]:
    """One point per step, in step order. A later record at a step adds its fields and replaces the
    ones it repeats, and never erases one it lacks: an evaluation line written after the step's train
    line, or a loop's end-of-training summary at the last step, keeps that step's losses. A step a
    resumed run logs again takes the new values. The Loss pane's store merges its columns the same way."""
    by_step: dict[int, MetricPoint] = {}
    for p in points:
        q = by_step.get(p.step)
        if q is None:
            by_step[p.step] = p
            continue
        later = [getattr(p, name) for name in _FIELDS]
        by_step[p.step] = MetricPoint(
            p.step, *[v if v is not None else getattr(q, name) for v, name in zip(later, _FIELDS)]
        )
    return [by_step[s] for s in sorted(by_step)]


def series(points: Sequence[MetricPoint], name: str = "train_loss") -> tuple[list[int], list[float]]:
    """(steps, values) of one field, skipping points where it is absent."""
    if isinstance(points, MetricPoints):
        return points.series(name)
    xs, ys = [], []
    for p in points:
        v = getattr(p, name)
        if v is not None:
            xs.append(p.step)
            ys.append(v)
    return xs, ys
