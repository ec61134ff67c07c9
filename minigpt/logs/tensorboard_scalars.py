"""The scalars of one TensorBoard event file, read a chunk at a time and resumed where the last
read stopped: what `minigpt.logs.tensorboard` joins into a run's metrics log, read once whole for
a check, or followed as the writer appends.

Records come framed and checked by `tensorboard_records`, their scalars decoded by
`tensorboard_events` (TensorBoard's `Event` protobuf class is handed in). Only scalars are kept,
per tag, as compact columns (16 bytes a value); images, histograms and other summaries are dropped,
never held. A damaged stretch is kept as a `Lost`, with the steps read either side of it, for the
verdict's note.
"""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from minigpt.errors import DataError
from minigpt.io.files import stat_input
from minigpt.logs.tensorboard_events import scalar_values
from minigpt.logs.tensorboard_records import FOOTER, HEADER, Chunk, Damage, read_records

CHUNK_BYTES = 16 << 20  # read at a time: a file with images is never in memory whole


@dataclass
class Lost:
    """A damaged stretch of the file, and the steps read just before and after it (None: none)."""

    damage: Damage
    after_step: int | None
    before_step: int | None = None


class EventFileScalars:
    """One event file's scalars so far (`series`: tag as the run holds it -> steps, values in file
    order) and where the next read starts. `prefix` is the add_scalars child or split folder the
    file sits in (see `minigpt.logs.tensorboard`); `event` TensorBoard's `Event` protobuf class."""

    def __init__(self, path: Path, prefix: str | None, event: Any, tag_in: Any):
        self.path, self.prefix = path, prefix
        self.offset = 0  # where the next read starts
        self.tail = 0  # bytes of a record still being written, at `offset`
        self.series: dict[str, tuple[array, array]] = {}
        self.lost: list[Lost] = []
        self.identity: tuple[int, int] | None = None  # (device, inode) when first read: a new file is read anew
        self._parse = event.FromString
        self._tag_in = tag_in  # (prefix, tag) -> the tag as the run holds it
        self._plugins: dict[str, str] = {}  # tag -> its plugin, from its first metadata (TF1 writes it once)
        self._last_step: int | None = None

    def pending(self, size: int) -> int:
        """Bytes of the file not read yet, beyond a record still being written."""
        return max(0, size - self.offset - self.tail)

    def read(self, fh: Any, size: int, max_bytes: int = CHUNK_BYTES) -> int:
        """Read about `max_bytes` more of the open file `fh` (whose size is `size`); the bytes consumed."""
        start = self.offset
        chunk = read_records(fh, self.offset, size, max_bytes)
        self.offset, self.tail = chunk.end, chunk.tail
        self._take(chunk)
        return self.offset - start

    def _take(self, chunk: Chunk) -> None:
        """Keep the chunk's scalars; give each damaged stretch the steps read either side of it."""
        got = scalar_values(chunk, self._parse, self._plugins)
        if len(got.step):
            for lost in self.lost:  # stretches at the end of earlier chunks: this chunk's first step follows them
                if lost.before_step is None:
                    lost.before_step = int(got.step[0])
        damage = chunk.damage + [
            Damage(at - HEADER, at + chunk.lengths[i] + FOOTER, "not an Event protobuf", i)
            for i, at in ((i, chunk.base + chunk.starts[i]) for i in got.undecodable)
        ]
        for d in sorted(damage, key=lambda d: d.offset):
            i = int(np.searchsorted(got.record, d.record))
            after = int(got.step[i - 1]) if i else self._last_step
            self.lost.append(Lost(d, after, int(got.step[i]) if i < len(got.step) else None))
        if len(got.step):
            self._last_step = int(got.step[-1])
        by_tag = np.argsort(got.tag, kind="stable")  # each tag's values, still in record order
        bounds = np.searchsorted(got.tag[by_tag], np.arange(len(got.tags) + 1))
        for k, tag in enumerate(got.tags):
            rows = by_tag[bounds[k] : bounds[k + 1]]
            if len(rows):
                steps, values = self.series.setdefault(self._tag_in(self.prefix, tag), (array("q"), array("d")))
                steps.frombytes(got.step[rows].astype(np.int64).tobytes())
                values.frombytes(got.value[rows].astype(np.float64).tobytes())


def _lost_words(lost: Lost) -> str:
    d = lost.damage
    after, before = lost.after_step, lost.before_step
    if after is not None and before is not None:
        steps = f"steps between {after:,} and {before:,} may be missing"
    elif before is not None:
        steps = f"steps before {before:,} may be missing"
    elif after is not None:
        steps = f"steps after {after:,} may be missing"
    else:
        steps = "no step was read either side of it"
    return f"{d.reason} at byte {d.offset:,} ({d.end - d.offset:,} bytes skipped): {steps}"


class RunScalars:
    """The scalars of a run's event files, each read from where it was left (`EventFileScalars`);
    `merged` joins a tag's values in run order, a later file's value for a step replacing an
    earlier one's. `since_marked` gives the values read since `mark` (what a follower has not given)."""

    def __init__(self, event: Any, tag_in: Any):
        self._event, self._tag_in = event, tag_in
        self.files: dict[Path, EventFileScalars] = {}  # in run order
        self._sizes: dict[Path, int] = {}
        self._marked: dict[tuple[Path, str], int] = {}

    def refresh(self, files: list[tuple[Path, str | None]]) -> bool:
        """Take the run's files as listed now (in run order), with their sizes; False when one read
        before was replaced, shrank or went: the run must be read anew."""
        listed: dict[Path, EventFileScalars] = {}
        for path, prefix in files:
            if not path.exists() and not path.is_symlink():
                continue  # removed since it was listed
            # a FIFO, folder, dangling link or unreadable file is named, never opened (a FIFO would block)
            st = stat_input(path, "TensorBoard event file", error=DataError)
            reader = self.files.get(path) or EventFileScalars(path, prefix, self._event, self._tag_in)
            if reader.identity not in (None, (st.st_dev, st.st_ino)) or st.st_size < reader.offset:
                return False  # replaced (another inode) or truncated: what was read no longer holds
            listed[path], self._sizes[path] = reader, st.st_size
        if set(self.files) - set(listed):
            return False
        self.files = listed
        return True

    def pending(self) -> int:
        """Bytes listed by the last `refresh` and not read yet."""
        return sum(r.pending(self._sizes[p]) for p, r in self.files.items())

    def read(self, max_bytes: int | None = None) -> bool:
        """Read about `max_bytes` of what is pending (all of it: None); False when a file was
        replaced since `refresh` (read the run anew). Raises DataError naming a file it cannot read."""
        budget = [max_bytes]  # shared by the files, in run order
        for path, reader in self.files.items():
            try:
                if not self._read_file(path, reader, budget):
                    return False
            except OSError as exc:
                raise DataError(
                    f"Unreadable TensorBoard event file {path}: {type(exc).__name__}: {exc}", path=path
                ) from None
        return True

    def _read_file(self, path: Path, reader: EventFileScalars, budget: list[int | None]) -> bool:
        """Read `path` on, taking what it read from `budget[0]`; False when the file was replaced."""
        size = self._sizes[path]

        def more() -> bool:
            return bool(reader.pending(size)) and (budget[0] is None or budget[0] > 0)

        if not more():
            return True
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if reader.identity not in (None, (st.st_dev, st.st_ino)):
                return False
            reader.identity = (st.st_dev, st.st_ino)
            while more():
                left = budget[0]
                consumed = reader.read(fh, size, CHUNK_BYTES if left is None else min(left, CHUNK_BYTES))
                if not consumed:
                    break
                if left is not None:
                    budget[0] = left - consumed
        return True

    def tags(self) -> set[str]:
        return {tag for reader in self.files.values() for tag in reader.series}

    def merged(self, tag: str) -> tuple[Any, Any]:
        """(steps, values) of `tag` as numpy arrays, one value per step in step order: the last read wins."""
        cols = [r.series[tag] for r in self.files.values() if tag in r.series]
        steps = np.concatenate([np.frombuffer(s, dtype=np.int64) for s, _ in cols])
        values = np.concatenate([np.frombuffer(v, dtype=np.float64) for _, v in cols])
        if np.all(steps[1:] > steps[:-1]):  # the common case: one value a step, in order
            return steps, values
        order = np.argsort(steps, kind="stable")  # a step's values in the order read: keep the last
        steps, values = steps[order], values[order]
        last = np.concatenate([steps[1:] != steps[:-1], [True]])
        return steps[last], values[last]

    def blocks(
        self, chosen: dict[str, str], fields: Sequence[str], size: int
    ) -> Iterator[tuple[list[int], list[list[float | None]]]]:
        """One point per step that a chosen tag (field -> tag) was logged at, in step order, as
        blocks of `size`: (steps, one column per name in `fields`, None where absent)."""
        merged = {name: self.merged(tag) for name, tag in chosen.items()}
        steps = np.sort(np.concatenate([s for s, _ in merged.values()]), kind="stable")  # sorted runs: a merge
        steps = steps[np.concatenate([[True], steps[1:] != steps[:-1]])] if len(steps) else steps
        full: dict[str, np.ndarray] = {}
        for name, (at, values) in merged.items():
            column = np.full(len(steps), None, dtype=object)
            column[np.searchsorted(steps, at)] = values.tolist()
            full[name] = column
        for start in range(0, len(steps), size):
            cut = slice(start, start + size)
            n = len(steps[cut])
            yield steps[cut].tolist(), [full[name][cut].tolist() if name in full else [None] * n for name in fields]

    def since_marked(self, tag: str) -> tuple[list[int], list[float]]:
        """`tag`'s values read since the last `mark`, in run order."""
        steps: list[int] = []
        values: list[float] = []
        for path, reader in self.files.items():
            if tag in reader.series:
                s, v = reader.series[tag]
                done = self._marked.get((path, tag), 0)
                steps += s[done:]
                values += v[done:]
        return steps, values

    def mark(self) -> None:
        self._marked = {(p, tag): len(s) for p, r in self.files.items() for tag, (s, _) in r.series.items()}

    def notes(self, root: Path) -> list[str]:
        """One note per file with a damaged stretch: where, why, and the steps it may have lost."""
        out = []
        for path, reader in self.files.items():
            if reader.lost:
                name = path.relative_to(root) if root in path.parents else path.name
                parts = [_lost_words(lost) for lost in reader.lost[:3]]
                more = f"; and {len(reader.lost) - 3} more" if len(reader.lost) > 3 else ""
                out.append(f"part of {name} is unreadable, skipped: " + "; ".join(parts) + more)
        return out
