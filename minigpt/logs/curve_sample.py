"""A metrics log read in bounded memory: its records merged by step (`metrics.merge_steps`: a later
record at a step adds fields, never erases one) and thinned to at most `cap` values a field, so a
ten-million-line log costs what a short one does. Pure Python (no torch, rich or textual).

While a field has at most `cap` values, the sample is exact: `points()` equals `merge_steps` of
every record. Past that, the field keeps only the steps a stride apart from its first logged step,
the stride doubling each time the field fills up again, so the kept steps stay evenly spread over
the whole run and a record at a kept step still merges exactly (a resumed run's repeated step takes
the new values). Kept whatever the stride, so no verdict hinges on a step the sample skipped:
- the record of the first non-finite train or val loss (what `diverged` names),
- the record of the highest train loss and of the highest learning rate so far (a spike, the peak
  LR the LR probe and the advice quote),
- the last `RECENT` records (the last step's values, a final non-finite gradient norm).
`note()` says, for the verdict, when and how much was thinned.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from itertools import compress

from minigpt.logs.metrics import MetricPoint, MetricPoints, MetricsLog, number_column, scan_metrics

FIELDS = ("train_loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s")  # MetricPoint's, after step
SAMPLE_CAP = 50_000  # values kept a field: a diagnosis of that many points takes a fraction of a second
RECENT = 8  # the last records, kept exactly
NONFINITE_PINS = ("train_loss", "val_loss")
PEAK_PINS = ("train_loss", "lr")
_MAX_STRIDE = 1 << 62


class CurveSample:
    """Records merged by step and thinned to at most `cap` values per field (see the module
    docstring). `fields` names the columns `add_columns` receives (MetricPoint's by default; the
    Loss pane adds its smoothed curves)."""

    def __init__(self, fields: Sequence[str] = FIELDS, cap: int = SAMPLE_CAP, recent: int = RECENT):
        if cap < 2:
            raise ValueError(f"cap must be >= 2; found {cap}")
        self.fields = tuple(fields)
        self.cap, self.recent = cap, recent
        self.records = 0  # records added, before merging and thinning
        self._entries: dict[int, list[float | None]] = {}  # step -> one value (or None) per field
        self._counts = [0] * len(self.fields)  # values kept per field
        self._anchor: list[int | None] = [None] * len(self.fields)  # first step each field was logged at
        self._stride = [1] * len(self.fields)
        self._pins: dict[str, int] = {}  # why -> the step whose record is kept whatever the stride
        self._peaks = dict.fromkeys(PEAK_PINS, -math.inf)
        self._recent_steps: list[int] = []  # the last `recent` records, not merged yet
        self._recent_cols: list[list[float | None]] = [[] for _ in self.fields]

    @property
    def thinned(self) -> bool:
        return any(k > 1 for k in self._stride)

    def stride(self, name: str) -> int:
        """Every how many steps (from its first) the field keeps a value: 1 while exact."""
        return self._stride[self.fields.index(name)]

    def kept(self) -> int:
        """Steps held (a bounded number: at most `cap` a field, plus the pinned and recent records)."""
        return len(self._entries) + len(self._recent_steps)

    def add_points(self, points: Iterable[MetricPoint]) -> None:
        rows = [(p.step, *[getattr(p, name, None) for name in self.fields]) for p in points]
        if rows:
            steps, *cols = zip(*rows)
            self.add_columns(steps, cols)

    def add_columns(self, steps: Sequence[int], columns: Sequence[Sequence]) -> None:
        """Add records in the order written: their steps and one column of raw values per field
        (None where a record lacks the field; numbers as strings or ints are converted)."""
        if not steps:
            return
        self.records += len(steps)
        steps = self._recent_steps + list(steps)
        cols = [old + number_column(col) for old, col in zip(self._recent_cols, columns)]
        cut = max(0, len(steps) - self.recent)
        self._recent_steps, self._recent_cols = steps[cut:], [col[cut:] for col in cols]
        if cut:
            self._merge([int(s) for s in steps[:cut]], [col[:cut] for col in cols])

    def _merge(self, steps: list[int], cols: list[list[float | None]]) -> None:
        pinned = self._pin(steps, cols)
        on_stride: dict[tuple[int, int], list[int]] = {}  # (anchor, stride) -> indices on it; fields share them
        entries = self._entries
        blank: list[float | None] = [None] * len(self.fields)
        for k, col in enumerate(cols):
            if self._anchor[k] is None:
                first = next((i for i, v in enumerate(col) if v is not None), None)
                if first is None:
                    continue
                self._anchor[k] = steps[first]
            anchor, stride = self._anchor[k], self._stride[k]
            assert anchor is not None
            if stride == 1:
                keep = [i for i, v in enumerate(col) if v is not None]
            else:
                if (anchor, stride) not in on_stride:
                    mask = [(s - anchor) % stride == 0 for s in steps]
                    on_stride[anchor, stride] = list(compress(range(len(steps)), mask))
                keep = [i for i in on_stride[anchor, stride] if col[i] is not None]
            if pinned:
                keep = sorted(set(keep).union(i for i in pinned if col[i] is not None))
            added = 0
            for i in keep:  # in the order written: a later record at a step replaces its values
                entry = entries.get(steps[i])
                if entry is None:
                    entry = entries[steps[i]] = blank.copy()
                added += entry[k] is None
                entry[k] = col[i]
            self._counts[k] += added
        while full := [k for k, n in enumerate(self._counts) if n > self.cap and self._stride[k] < _MAX_STRIDE]:
            self._thin(full)

    def _pin(self, steps: list[int], cols: list[list[float | None]]) -> list[int]:
        """Indices of the records in this block kept whatever the stride (see the module docstring)."""
        pinned: list[int] = []
        for name in NONFINITE_PINS:
            if name in self.fields and "nonfinite" not in self._pins:
                col = cols[self.fields.index(name)]
                present = [v for v in col if v is not None]
                if not math.isfinite(sum(present)):  # one C-level sum; the loop only on a hit (or an overflow)
                    bad = next((i for i, v in enumerate(col) if v is not None and not math.isfinite(v)), None)
                    if bad is not None:
                        self._pins["nonfinite"] = steps[bad]
                        pinned.append(bad)
        for name in PEAK_PINS:
            if name not in self.fields:
                continue
            col = cols[self.fields.index(name)]
            present = [v for v in col if v is not None]
            if not present:
                continue
            if not math.isfinite(sum(present)):
                present = [v for v in present if math.isfinite(v)]
            top = max(present, default=None)
            if top is None or top <= self._peaks[name]:
                continue
            self._peaks[name] = top
            i = col.index(top)
            self._unpin(name)
            self._pins[name] = steps[i]
            pinned.append(i)
        return pinned

    def _unpin(self, why: str) -> None:
        """Release a pinned step: its values that are not on the stride go."""
        step = self._pins.pop(why, None)
        if step is None or step in self._pins.values():
            return
        entry = self._entries.get(step)
        if entry is None:
            return
        for k, v in enumerate(entry):
            anchor = self._anchor[k]
            if v is not None and anchor is not None and (step - anchor) % self._stride[k]:
                entry[k] = None
                self._counts[k] -= 1
        if entry.count(None) == len(entry):
            del self._entries[step]

    def _thin(self, full: list[int]) -> None:
        """Double the stride of the fields in `full` and drop their values off the new stride (pinned
        steps stay), in one pass over the kept steps."""
        for k in full:
            self._stride[k] *= 2
        rules = [(k, self._anchor[k], self._stride[k]) for k in full]
        entries, width, pinned = self._entries, len(self.fields), set(self._pins.values())
        for step, entry in list(entries.items()):
            if step in pinned:
                continue
            for k, anchor, stride in rules:
                if entry[k] is not None and (step - anchor) % stride:  # type: ignore[operator]
                    entry[k] = None
                    self._counts[k] -= 1
            if entry.count(None) == width:
                del entries[step]

    def _merged(self) -> dict[int, list[float | None]]:
        """The kept steps with the recent records merged in (a copy: adding goes on after)."""
        entries = {step: list(entry) for step, entry in self._entries.items()}
        for i, step in enumerate(self._recent_steps):
            entry = entries.setdefault(int(step), [None] * len(self.fields))
            for k, col in enumerate(self._recent_cols):
                if col[i] is not None:
                    entry[k] = col[i]
        return entries

    def points(self) -> list[MetricPoint]:
        """One point per kept step, in step order, with MetricPoint's fields."""
        entries = self._merged()
        names = [(k, name) for k, name in enumerate(self.fields) if name in FIELDS]
        return [MetricPoint(step, **{name: entries[step][k] for k, name in names}) for step in sorted(entries)]

    def metric_points(self) -> MetricPoints:
        """`points()` as compact columns (what a `MetricsLog` holds)."""
        entries = self._merged()
        steps = sorted(entries)
        out = MetricPoints()
        columns = [
            [entries[s][self.fields.index(name)] for s in steps] if name in self.fields else [None] * len(steps)
            for name in FIELDS
        ]
        out.extend_columns(steps, columns)
        return out

    def series(self, name: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one field where it was kept, in step order."""
        k = self.fields.index(name)
        entries = self._merged()
        steps = [s for s in sorted(entries) if entries[s][k] is not None]
        return steps, [entries[s][k] for s in steps]  # type: ignore[misc]

    def note(self) -> str | None:
        """For the verdict: what was judged, when it is a downsample of the log (None when exact)."""
        if not self.thinned:
            return None
        thinned: dict[int, list[str]] = {}
        for k, name in enumerate(self.fields):
            if self._stride[k] > 1:
                thinned.setdefault(self._stride[k], []).append(name)
        every = "; ".join(f"{', '.join(names)} every {k:,} logged steps" for k, names in sorted(thinned.items()))
        return (
            f"judged a downsample of the log: {self.kept():,} steps of {self.records:,} records ({every}; "
            f"the first non-finite loss, the peak loss and learning rate and the last {self.recent} records "
            "kept exactly)"
        )


def sample_metrics(path: str | os.PathLike, cap: int = SAMPLE_CAP) -> MetricsLog:
    """Read the metrics JSONL at `path` streamed, into a `CurveSample` of at most `cap` values a
    field: `points` one per kept step, `records` the records read, a note when thinned. Raises as
    `metrics.read_metrics` does."""
    sample = CurveSample(cap=cap)
    log = MetricsLog(path=str(path), points=MetricPoints())
    scan_metrics(path, log, sample.add_columns)
    return sampled_log(log, sample)


def sampled_log(log: MetricsLog, sample: CurveSample) -> MetricsLog:
    """`log` with the sample's points, its record count and, when thinned, the note saying so."""
    log.points = sample.metric_points()
    log.records = sample.records
    note = sample.note()
    if note is not None:
        log.notes.append(note)
    return log
