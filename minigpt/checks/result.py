"""What a check returns: a status, a one-line summary, the measured values, causes and fixes."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

# the colour of each status (rich style names, but plain strings: this module imports no UI code);
# the CLI and the terminal UI both read it
STATUS_STYLE = {
    "pass": "green",
    "warn": "yellow",
    "fail": "bold red",
    "error": "bold magenta",
    "skip": "dim",
    "pending": "dim",
    "running": "bold cyan",
}


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"  # the check itself could not run
    SKIP = "skip"  # not run: a dependency did not pass, or nothing to check

    @property
    def mark(self) -> str:
        return {"pass": "✓", "warn": "!", "fail": "✗", "error": "E", "skip": "-"}[self.value]

    @property
    def blocks_dependents(self) -> bool:
        return self in (Status.FAIL, Status.ERROR, Status.SKIP)


@dataclass
class CheckResult:
    id: str
    stage: str
    status: Status
    summary: str
    values: dict = field(default_factory=dict)
    causes: list[str] = field(default_factory=list)  # likely causes, for anything but pass
    fixes: list[str] = field(default_factory=list)  # what to try
    notes: list[str] = field(default_factory=list)  # informational, any status
    duration_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "stage": self.stage,
            "status": self.status.value,
            "summary": self.summary,
            "values": _jsonable(self.values),
            "causes": self.causes,
            "fixes": self.fixes,
            "notes": self.notes,
            "duration_s": round(self.duration_s, 4),
        }


def _jsonable(value: object) -> Any:
    """Plain JSON values only: tensors never reach here, non-finite floats become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


class Outcome(Exception):
    """Raised inside a check to end it early with a status (keeps check bodies flat)."""

    def __init__(
        self,
        status: Status,
        summary: str,
        *,
        causes: Iterable[str] = (),
        fixes: Iterable[str] = (),
        values: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(summary)
        self.status, self.summary = status, summary
        self.causes, self.fixes, self.values = list(causes), list(fixes), dict(values or {})


SCHEMA_VERSION = 2  # 2: the report names the files it judged (`judged`)


@dataclass(frozen=True)
class FileIdentity:
    """Which file a report judged: path, size and modification time (and the step, for a checkpoint)."""

    role: str  # "checkpoint", "metrics", "tokenizer", "train_ids"
    path: str
    bytes: int | None = None
    mtime: float | None = None  # seconds since the epoch
    step: int | None = None

    def to_dict(self) -> dict:
        return {"role": self.role, "path": self.path, "bytes": self.bytes, "mtime": self.mtime, "step": self.step}

    def describe(self) -> str:
        import time

        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.mtime)) if self.mtime is not None else "?"
        step = f"step {self.step}, " if self.step is not None else ""
        return f"{self.path} ({step}modified {when})"


@dataclass
class Report:
    results: list[CheckResult]
    fault: str | None = None
    fault_notes: list[str] = field(default_factory=list)
    started_at: float = 0.0
    seconds: float = 0.0
    cancelled: bool = False
    only: list[str] | None = None  # the checks asked for (their dependencies ran too); None = all
    judged: list[FileIdentity] = field(default_factory=list)  # the files this report's verdicts are about

    def by_id(self) -> dict[str, CheckResult]:
        return {r.id: r for r in self.results}

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status in (Status.FAIL, Status.ERROR)]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[r.status.value] += 1
        return out

    def judged_file(self, role: str) -> FileIdentity | None:
        return next((f for f in self.judged if f.role == role), None)


def name_list(names: list[str], limit: int = 4) -> str:
    """Parameter names for a sentence: the first few, then how many more."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
