"""Messages shared across panes: past-tense events carrying plain Python values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:  # torch-free either way; imported for the types only
    from minigpt.checks.result import CheckResult, Report


@dataclass
class CheckStarted(Message):
    check_id: str
    index: int
    total: int


@dataclass
class CheckProgressed(Message):
    check_id: str
    fraction: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CheckProgressed) and message.check_id == self.check_id


@dataclass
class CheckFinished(Message):
    result: CheckResult  # plain values only
    index: int
    total: int


@dataclass
class ChecksFinished(Message):
    report: Report


@dataclass
class FaultChanged(Message):
    fault: str | None


@dataclass
class GradientsMeasured(Message):
    """A per-parameter gradient table: from the gradients check or a live training run."""

    rows: list[dict]
    global_norm: float
    clip: float | None
    source: str


@dataclass
class ChecksStarted(Message):
    """A check run began: the ids it will run, in pipeline order."""

    check_ids: list[str]
    only: list[str] | None


@dataclass
class DemoProgressed(Message):
    """Building the demo workspace: a stage name and the overall fraction done."""

    stage: str
    fraction: float

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DemoProgressed)


@dataclass
class TrainingRequested(Message):
    """A pane asks the app to start its training run with these flags (after `--workspace W`)."""

    args: list[str]


@dataclass
class TrainingStopRequested(Message):
    """A pane asks the app to stop its training run."""


@dataclass
class TrainingStarted(Message):
    """The UI started a `minigpt train` subprocess."""

    pid: int
    command: list[str]
    log_path: str  # where its output goes


@dataclass
class TrainingEnded(Message):
    """The UI's training subprocess exited (by itself, by a crash, or stopped from the UI)."""

    returncode: int
    log_path: str
    log_tail: str
    stopped: bool = False  # stopped from the UI
