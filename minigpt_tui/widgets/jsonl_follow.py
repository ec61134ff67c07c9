"""`tail -f` for a JSONL file of records (logs/grads.jsonl): `minigpt.logs.follow.LineFollower`
(the one follower: only new bytes read, a shrunk, replaced or rewritten file read again from the
top with `reset` set) with each line parsed as a JSON object. Pure Python."""

from __future__ import annotations

import json
import os

from minigpt.logs.follow import LineFollower


class JsonlFollower(LineFollower):
    def __init__(self, path: str | os.PathLike):
        # a grads log that disappears (a fresh run archived it) must clear the table
        super().__init__(path, restart_when_missing=True)
        self.bad_lines = 0

    def _restart(self) -> None:
        super()._restart()
        self.bad_lines = 0

    def poll(self) -> list[dict]:
        """The complete JSON objects added since the last poll (a partial last line waits)."""
        out = []
        for raw in self.poll_lines():
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (ValueError, RecursionError):  # RecursionError: a line nested thousands deep
                self.bad_lines += 1
                continue
            if isinstance(record, dict):
                out.append(record)
            else:
                self.bad_lines += 1
        return out
