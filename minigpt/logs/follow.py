"""Following a log as it is written (`tail -f`): new bytes only, a partial last line waits for its
newline, and a file that shrank, was replaced or rewritten is read again from the top.
`MetricsFollower` parses metrics records as it goes (the loss pane follows `logs/metrics.jsonl`
with it); the gradients pane's `JsonlFollower` follows `logs/grads.jsonl`."""

from __future__ import annotations

import os
from pathlib import Path

from minigpt.errors import UnsafePathError
from minigpt.io.files import open_regular
from minigpt.logs.metrics import (
    MAX_LINE_BYTES,
    READ_BLOCK,
    LineSplitter,
    MetricPoint,
    count_bad,
    parse_values,
)


class LineFollower:
    """`tail -f` for a file of lines: `poll_lines()` reads only the bytes added since the last poll
    and returns the complete new lines; a partial last line waits for its newline. When the file
    shrank, was replaced (other inode) or its first bytes changed, it starts again from the top:
    `reset` is True for that poll and `resets` counts them, so a view knows to clear itself.
    A missing file yields nothing (training may not have created it yet); with
    `restart_when_missing`, a file that disappears after being read also counts as a restart."""

    _HEAD = 256  # bytes compared to notice a rewrite that did not shrink the file

    def __init__(
        self, path: str | os.PathLike, *, restart_when_missing: bool = False, max_line: int = 16 * MAX_LINE_BYTES
    ):
        self.path = Path(path)
        self.restart_when_missing = restart_when_missing
        self.reset = False
        self.resets = 0
        self._offset = 0
        self._splitter = LineSplitter(max_line)  # a line over max_line comes out as OVERLONG_LINE
        self._identity: tuple[int, int] | None = None
        self._head = b""

    def _restart(self) -> None:
        self._offset, self._head = 0, b""
        self._splitter.reset()
        self.reset = True
        self.resets += 1

    def poll_lines(self, max_bytes: int | None = None) -> list[bytes]:
        """Complete new lines since the last poll (at most `max_bytes` read, if given). The file is
        opened without following a link or opening a FIFO (a special file reads as missing)."""
        self.reset = False
        try:
            fd = open_regular(self.path, os.O_RDONLY, what="the log", action="read")
        except (UnsafePathError, OSError):
            if self.restart_when_missing and self._identity is not None:
                self._identity = None
                self._restart()
            return []
        lines: list[bytes] = []
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            identity = (st.st_dev, st.st_ino)
            if self._identity is not None and identity != self._identity:
                self._restart()
            elif st.st_size < self._offset:
                self._restart()
            elif self._head and f.read(len(self._head)) != self._head:
                self._restart()
            self._identity = identity
            f.seek(self._offset)
            want = st.st_size - self._offset if max_bytes is None else min(st.st_size - self._offset, max_bytes)
            while want > 0:  # in blocks: the splitter drops an over-long line's bytes as they come
                data = f.read(min(want, READ_BLOCK))
                if not data:
                    break
                want -= len(data)
                if self._offset < self._HEAD:  # the head so far is all we have read
                    self._head = (self._head + data)[: self._HEAD]
                self._offset += len(data)
                lines += self._splitter.feed(data)
        return lines

    @property
    def tail(self) -> bytes:
        """The last line read so far without its newline (empty when the file ended with one)."""
        return self._splitter.tail

    @property
    def pending_bytes(self) -> int:
        """Bytes in the file not read yet (non-zero after a poll capped by `max_bytes`)."""
        try:
            return max(0, self.path.stat().st_size - self._offset)
        except OSError:
            return 0


class MetricsFollower(LineFollower):
    """A `LineFollower` that parses metrics records (see the module docstring); lines that are not
    records are counted as bad, with their line numbers."""

    def __init__(self, path: str | os.PathLike):
        super().__init__(path, max_line=MAX_LINE_BYTES)
        self.bad_lines = 0
        self.bad_line_numbers: list[int] = []
        self.notes: list[str] = []  # how the log was read (a JSONL log needs none)
        self._lineno = 0

    def _restart(self) -> None:
        super()._restart()
        self._lineno = 0
        self.bad_lines, self.bad_line_numbers = 0, []

    def poll(self, max_bytes: int | None = None) -> list[MetricPoint]:
        """New complete records since the last poll (at most `max_bytes` read, if given)."""
        lines = self.poll_lines(max_bytes)
        out: list[MetricPoint] = []
        for raw, values in zip(lines, parse_values(lines)):
            self._lineno += 1
            if values is not None:
                out.append(MetricPoint(*values))
            elif raw.strip():
                count_bad(self, self._lineno)
        return out
