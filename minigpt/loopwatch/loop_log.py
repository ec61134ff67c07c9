"""Reading a watched run's `logs/loop.jsonl` (and `logs/ranks/`) back, without torch.

Lines that are not JSON objects are counted, never fatal: a run being written has a partial last
line, and a killed run has no closing line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minigpt.io.lock import holder
from minigpt.io.workspace import Workspace

# what a step line leaves out when it holds these values (steps between full readings, the most
# lines by far, leave out most of them): the reader puts them back
STEP_DEFAULTS: dict = {
    "deep": False,
    "cleared_before": None,
    "cleared_within": None,
    "train_in_eval_mode": 0,
    "eval_forwards": 0,
    "eval_in_train_mode": 0,
    "eval_with_grad": 0,
    "autocast": None,
    "targets": None,
    "closure": False,
}
MAX_LINE = 1 << 20  # longer lines are not the watch's (skipped, counted)
RANK_START_SLACK_S = 600.0  # a rank file belongs to this run if it started within this of rank 0


@dataclass
class LoopLog:
    path: Path
    header: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    closed: dict | None = None
    errors: list[dict] = field(default_factory=list)
    bad_lines: int = 0
    ranks: dict[int, dict[int, list[int]]] = field(default_factory=dict)  # rank -> step -> fingerprints
    writer_alive: bool = False  # the workspace lock is held (the loop is still running)

    @property
    def deep(self) -> list[dict]:
        return [s for s in self.steps if s.get("deep")]

    @property
    def last_step(self) -> int:
        return self.steps[-1]["step"] if self.steps else 0

    @property
    def finished(self) -> bool:
        """The loop ended: closed by the watch, or its writer is gone."""
        return self.closed is not None or not self.writer_alive

    def writer(self) -> str:
        h = self.header
        script = Path(str(h.get("script", "?"))).name
        if self.errors:
            state = f"the watch turned itself off at step {self.errors[0].get('step', '?')}"
        else:
            state = "closed" if self.closed else ("running" if self.writer_alive else "not closed (killed?)")
        return f"{script} (PID {h.get('pid', '?')}, {state})"


def read_loop_log(ws: Workspace) -> LoopLog | None:
    """The watched run in `ws`, or None when nothing was watched there."""
    path = ws.loop_log
    if not path.is_file():
        return None
    log = LoopLog(path)
    for record in _records(path, log):
        kind = record.get("kind")
        if kind == "header":
            log.header = record
        elif kind == "step" and isinstance(record.get("step"), int):
            log.steps.append({**STEP_DEFAULTS, "fingerprints": [], **record})
        elif kind == "steps":
            steps = expand_steps(record)
            if steps is None:
                log.bad_lines += 1
            else:
                log.steps.extend(steps)
        elif kind == "closed":
            log.closed = record
        elif kind == "error":
            log.errors.append(record)
    found = holder(ws.root)
    log.writer_alive = found is not None and found.pid == log.header.get("pid")
    if log.header.get("world_size", 1) > 1 and ws.ranks.is_dir():
        log.ranks = _read_ranks(ws.ranks, log)
    return log


def steps_line(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """One loop-log line for consecutive steps between full readings, from their short lines: a field
    with the same value on every step once (`same`), the others as columns (`each`, `null` where a
    step's line leaves the field out). `loop_log.read_loop_log` turns it back into one line a step.
    Twenty short lines cost twenty encodings in the user's loop; this costs one."""
    keys: dict[str, None] = {}
    for line in lines:
        keys.update(dict.fromkeys(line))
    keys.pop("kind", None)
    same: dict[str, Any] = {}
    each: dict[str, list] = {}
    n = len(lines)
    for key in keys:
        values = [line.get(key) for line in lines]
        first = values[0]
        if first is not None and values.count(first) == n:
            same[key] = first
        else:
            each[key] = values
    return {"kind": "steps", "same": same, "each": each}


def expand_steps(record: dict) -> list[dict] | None:
    """The step lines a `steps_line` stands for (with `STEP_DEFAULTS` put back), or None when it is
    not one (then the line is counted as bad)."""
    same, each = record.get("same"), record.get("each")
    if not isinstance(same, dict) or not isinstance(each, dict) or not each:
        return None
    columns = list(each.values())
    n = len(columns[0]) if isinstance(columns[0], list) else -1
    if n < 1 or any(not isinstance(c, list) or len(c) != n for c in columns):
        return None
    out = []
    for i in range(n):
        step = {**STEP_DEFAULTS, "fingerprints": [], "kind": "step", **same}
        for key, column in each.items():
            if column[i] is not None:
                step[key] = column[i]
        if not isinstance(step.get("step"), int):
            return None
        out.append(step)
    return out


def _records(path: Path, log: LoopLog) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as fh:
        for line in fh:
            if len(line) > MAX_LINE or not line.endswith(b"\n"):
                if line.strip():
                    log.bad_lines += line.endswith(b"\n")  # a partial last line is a write in progress
                continue
            try:
                record = json.loads(line)
            except ValueError:
                log.bad_lines += 1
                continue
            if isinstance(record, dict):
                yield record
            else:
                log.bad_lines += 1


def _read_ranks(folder: Path, log: LoopLog) -> dict[int, dict[int, list[int]]]:
    started = float(log.header.get("started", 0.0))
    out: dict[int, dict[int, list[int]]] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if not (entry.name.startswith("rank") and entry.name.endswith(".jsonl") and entry.is_file()):
            continue
        rank_log = LoopLog(Path(entry.path))
        rank, steps = None, {}
        for record in _records(Path(entry.path), rank_log):
            if record.get("kind") == "header":
                if abs(float(record.get("started", 0.0)) - started) > RANK_START_SLACK_S:
                    break  # left by an earlier run
                rank = record.get("rank")
            elif rank is not None and isinstance(record.get("step"), int):
                steps[record["step"]] = list(record.get("fingerprints") or [])
        if isinstance(rank, int) and steps:
            out[rank] = steps
    return out
