"""`tail -f` for a JSONL file of records (logs/grads.jsonl): `minigpt.metrics_log.MetricsFollower`'s
idea for raw JSON objects. Only the bytes added since the last poll are read; a file that shrank,
was replaced (other inode) or whose first bytes changed is read again from the top, with `reset`
set for that poll, so a view drops what it showed from the old file. Pure Python."""

from __future__ import annotations

import json
import os
from pathlib import Path


class JsonlFollower:
    _HEAD = 256  # bytes compared to notice a rewrite that did not shrink the file

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.reset = False  # True for the poll that found the file rewritten
        self.resets = 0
        self.bad_lines = 0
        self._offset = 0
        self._buffer = b""
        self._identity: tuple[int, int] | None = None
        self._head = b""

    def _restart(self) -> None:
        self._offset, self._buffer, self._head, self.bad_lines = 0, b"", b"", 0
        self.reset = True
        self.resets += 1

    def poll(self) -> list[dict]:
        """The complete JSON objects added since the last poll (a partial last line waits)."""
        self.reset = False
        try:
            f = open(self.path, "rb")
        except OSError:  # not written yet (training has not evaluated), or removed
            if self._identity is not None:
                self._identity = None
                self._restart()
            return []
        with f:
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
            data = f.read(st.st_size - self._offset)
        if not data:
            return []
        if self._offset < self._HEAD:
            self._head = (self._head + data)[: self._HEAD]
        self._offset += len(data)
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        out = []
        for raw in lines:
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                self.bad_lines += 1
                continue
            if isinstance(record, dict):
                out.append(record)
            else:
                self.bad_lines += 1
        return out
