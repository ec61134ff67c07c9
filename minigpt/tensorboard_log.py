"""Reading a TensorBoard event file or folder as a metrics log, so `training_curve` and the Loss
pane work on runs that log with `SummaryWriter` instead of JSONL.

Needs the optional extra: `pip install 'minigpt-tui[tensorboard]'` (TensorBoard's own event
reader; we never parse the protobuf records by hand). Scalar tags are matched case-insensitively,
first match wins per field:

- train loss: `loss`, `train/loss`, `train_loss`, `loss/train`, `training/loss`
- val loss: `val/loss`, `val_loss`, `loss/val`, `eval/loss`, `validation/loss`, `valid/loss`, `loss/validation`
- learning rate: `lr`, `learning_rate`, `train/lr`, `train/learning_rate`, `lr-adamw`
- gradient norm: `grad_norm`, `train/grad_norm`, `gradient_norm`

Points are keyed by the event's step; several event files in one folder (a resumed run) are read
in file-name order, a later value for the same step replacing an earlier one.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DataError
from .metrics_log import MetricPoint, MetricPoints, MetricsLog

TAGS = {
    "train_loss": ("loss", "train/loss", "train_loss", "loss/train", "training/loss"),
    "val_loss": ("val/loss", "val_loss", "loss/val", "eval/loss", "validation/loss", "valid/loss", "loss/validation"),
    "lr": ("lr", "learning_rate", "train/lr", "train/learning_rate", "lr-adamw"),
    "grad_norm": ("grad_norm", "train/grad_norm", "gradient_norm"),
}
EXTRA = "pip install 'minigpt-tui[tensorboard]'"


def is_tensorboard_path(path: str | os.PathLike) -> bool:
    """An event file (`events.out.tfevents.*`) or a folder holding one."""
    p = Path(path)
    if p.is_file():
        return "tfevents" in p.name
    return p.is_dir() and any(p.glob("events.out.tfevents.*"))


def _event_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted(path.glob("events.out.tfevents.*"))
    if not files:
        raise DataError(
            f"No TensorBoard event files in {path}",
            path=path,
            causes=["the folder holds no events.out.tfevents.* file", "point at the run's log folder"],
        )
    return files


def read_tensorboard(path: str | os.PathLike) -> MetricsLog:
    """The scalars of a TensorBoard run as a MetricsLog (see the module docstring for the tags)."""
    path = Path(path)
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    except ImportError:
        raise DataError(
            f"{path} is a TensorBoard log; reading it needs the optional extra: {EXTRA}", path=path
        ) from None
    series: dict[str, dict[int, float]] = {}  # tag (lower case) -> step -> value; later files win
    known = {tag.lower() for tags in TAGS.values() for tag in tags}
    for file in _event_files(path):
        try:
            events = list(EventFileLoader(str(file)).Load())
        except Exception as exc:  # a truncated or foreign file: TensorBoard's reader raises various types
            raise DataError(
                f"Unreadable TensorBoard event file {file}: {type(exc).__name__}: {exc}", path=file
            ) from None
        for event in events:
            for value in event.summary.value:
                tag = value.tag.lower()
                number = _scalar(value) if tag in known else None
                if number is not None:
                    series.setdefault(tag, {})[int(event.step)] = number
    by_step: dict[int, dict[str, float]] = {}
    for field, tags in TAGS.items():
        tag = next((t.lower() for t in tags if t.lower() in series), None)  # the first known tag present
        for step, number in (series[tag] if tag else {}).items():
            by_step.setdefault(step, {})[field] = number
    if not by_step:
        raise DataError(
            f"No loss scalars in the TensorBoard log {path}",
            path=path,
            causes=[f"the run logs its loss under another tag; known tags: {', '.join(TAGS['train_loss'])}"],
        )
    points = MetricPoints(MetricPoint(step, **fields) for step, fields in sorted(by_step.items()))
    return MetricsLog(str(path), points)


def _scalar(value) -> float | None:
    if value.HasField("simple_value"):
        return float(value.simple_value)
    if value.HasField("tensor") and value.tensor.float_val:  # add_scalar(new_style=True) / tf.summary
        return float(value.tensor.float_val[0])
    if value.HasField("tensor") and value.tensor.double_val:
        return float(value.tensor.double_val[0])
    return None
