"""One reading of a run's training log, shared by the checks, the CLI's report and the Loss pane:
a metrics JSONL (`logs/metrics.jsonl`, what the watch and the trainer write) or a TensorBoard
event file or folder. `read_run_metrics` reads it streamed into a bounded sample (`curve_sample`);
`run_follower` follows it as it grows.
"""

from __future__ import annotations

import os
from pathlib import Path

from minigpt.logs.curve_sample import SAMPLE_CAP, sample_metrics
from minigpt.logs.follow import MetricsFollower
from minigpt.logs.metrics import MetricsLog
from minigpt.logs.tensorboard import TensorBoardFollower, is_tensorboard_path, read_tensorboard


def read_run_metrics(path: str | os.PathLike, cap: int = SAMPLE_CAP) -> MetricsLog:
    """The log at `path`, its points one per step and at most `cap` a field (`curve_sample`: exact
    below that, an evenly thinned sample above it, noted for the verdict): TensorBoard events (a
    `TensorBoardLog`, with the tags read and the notes on what was left unread) or a metrics JSONL,
    read streamed. Raises DataError when it is neither or is unreadable."""
    path = Path(path)
    if is_tensorboard_path(path):
        return read_tensorboard(path, cap)
    return sample_metrics(path, cap)


def run_follower(path: str | os.PathLike) -> MetricsFollower | TensorBoardFollower:
    """A follower for the log at `path`: `poll()` gives the new points, `reset` says the points so
    far were replaced (a file rewritten, a TensorBoard run read anew)."""
    path = Path(path)
    return TensorBoardFollower(path) if is_tensorboard_path(path) else MetricsFollower(path)
