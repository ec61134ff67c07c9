"""Reading a TensorBoard event file or folder as a metrics log, so `training_curve` and the Loss
pane work on runs that log with `SummaryWriter` instead of JSONL.

Needs the optional extra: `pip install 'minigpt-tui[tensorboard]'` (TensorBoard's `Event`
protobuf). The files are read by `tensorboard_scalars` a chunk at a time, their records framed and
CRC-checked by `tensorboard_records` and their scalars decoded by `tensorboard_events`, not by
TensorBoard's loader: without TensorFlow that checks CRCs in pure Python (about 1 MB/s) and ends a
file silently at its first damaged record. Here a damaged record is skipped, and the notes name it
with the steps it may have lost; a last record still being written (a live run) is not damage.

Tags, as people write them (case-insensitive). The exact names below win, in order; otherwise a
tag is read by its words (split at `/`, `_`, `-`, `.`, space): a tag with the word `loss` is a val
loss when it also says val / valid / validation / eval, a train loss when it says train / training
or nothing else (`loss`, `Loss/train_step`, `training_loss`, `validation_loss`, `eval/loss`); a
per-step variant is preferred to a per-epoch one (Lightning's `train_loss_step`/`_epoch`). A loss
on a test split (`Loss/test`, PyTorch's TensorBoard recipe) is the validation loss when no tag is
one, and the notes say so; a loss tag left unjudged is named in the notes.

- train loss: `loss`, `train/loss`, `train_loss`, `loss/train`, `training/loss`
- val loss: `val/loss`, `val_loss`, `loss/val`, `eval/loss`, `validation/loss`, `valid/loss`, `loss/validation`
- learning rate: `lr`, `learning_rate`, `train/lr`, `train/learning_rate`, `lr-adamw` (or the word lr)
- gradient norm: `grad_norm`, `train/grad_norm`, `gradient_norm`

Folders: a run folder holds `events.out.tfevents.*`; its subfolders with event files are
`add_scalars("Loss", {"train": ..., "val": ...})` children, whose tag is the subfolder's name
(`Loss_train`). Subfolders named for a split (`train`, `val`, `eval`, `test`...: one
`SummaryWriter` per split) are one run, their tags read under the split's name (`val/loss`). A
folder with no event files of its own is otherwise a parent of runs (`runs/`): its one run, or the
newest of several (named in `notes`), is read.

Points are keyed by the event's step; several event files in one folder (a resumed run) are read
in file-name order, a later value for the same step replacing an earlier one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt.errors import DataError
from minigpt.logs.curve_sample import CurveSample, sampled_log
from minigpt.logs.metrics import MetricPoint, MetricPoints, MetricsLog

if TYPE_CHECKING:  # the reader loads numpy and TensorBoard's protobufs: only when a log is read (`_reader`)
    from minigpt.logs.tensorboard_scalars import RunScalars

TAGS = {
    "train_loss": ("loss", "train/loss", "train_loss", "loss/train", "training/loss"),
    "val_loss": ("val/loss", "val_loss", "loss/val", "eval/loss", "validation/loss", "valid/loss", "loss/validation"),
    "lr": ("lr", "learning_rate", "train/lr", "train/learning_rate", "lr-adamw"),
    "grad_norm": ("grad_norm", "train/grad_norm", "gradient_norm"),
}
EXTRA = "pip install 'minigpt-tui[tensorboard]'"
EVENTS = "events.out.tfevents.*"
_VAL_WORDS = {"val", "valid", "validation", "eval", "evaluation", "dev"}
_TRAIN_WORDS = {"train", "training"}
_TEST_WORDS = {"test", "testing"}  # a held-out loss: the validation loss when the run logs no other
_OTHER_WORDS = _TEST_WORDS | {"aux", "reg", "kl", "z"}  # a loss that is neither the train nor the val loss
_SPLIT_FOLDERS = _VAL_WORDS | _TRAIN_WORDS | _TEST_WORDS  # one SummaryWriter per split: run/train, run/val
_POINT_FIELDS = tuple(f.name for f in fields(MetricPoint))[1:]  # after step
_BLOCK = 10_000  # points handed on at a time: a CurveSample thins as it goes, cheaper than thinning all at once
_HAND_OUT = 50_000  # points a follower's poll gives at most: a million-step run is given over 20 short polls


@dataclass
class TensorBoardLog(MetricsLog):
    tags: dict[str, str] = field(default_factory=dict)  # field -> the tag read for it


def _words(tag: str) -> list[str]:
    return [w for w in re.split(r"[/_\-.\s]+", tag.lower()) if w]


def tag_field(tag: str) -> str | None:
    """Which metrics field a scalar tag holds, by its exact name or by its words; None: not ours."""
    low = tag.lower()
    for name, tags in TAGS.items():
        if low in tags:
            return name
    words = set(_words(tag))
    if "loss" in words:
        if words & _OTHER_WORDS:
            return None
        if words & _VAL_WORDS:
            return "val_loss"
        return "train_loss"  # train / training, or nothing else: the loss being minimised
    if "lr" in words or {"learning", "rate"} <= words:
        return "lr"
    if {"grad", "norm"} <= words or {"gradient", "norm"} <= words:
        return "grad_norm"
    return None


def _is_test_loss(tag: str) -> bool:
    """A loss on a test split (`Loss/test`, `test_loss`): read as the validation loss when no tag is one."""
    words = set(_words(tag))
    return "loss" in words and bool(words & _TEST_WORDS) and not words & (_OTHER_WORDS - _TEST_WORDS)


def _rank(name: str, tag: str) -> tuple:
    """Lower is preferred: an exact known tag (in TAGS order), then per-step over per-epoch, then short."""
    low, words = tag.lower(), _words(tag)
    exact = TAGS[name].index(low) if low in TAGS[name] else len(TAGS[name])
    return (exact, "epoch" in words, "step" not in words, len(low), low)


def _has_events(folder: Path) -> bool:
    return any(folder.glob(EVENTS))


def is_tensorboard_path(path: str | os.PathLike) -> bool:
    """An event file (`events.out.tfevents.*`), a run folder holding one, or a parent of run folders."""
    p = Path(path)
    if p.is_file():
        return "tfevents" in p.name
    return p.is_dir() and (_has_events(p) or any(p.glob(f"*/{EVENTS}")) or any(p.glob(f"*/*/{EVENTS}")))


def _newest(files: list[Path]) -> float:
    return max((f.stat().st_mtime for f in files), default=0.0)


def _choose_run(path: Path) -> tuple[Path, list[str]]:
    """The run folder to read under `path`, and a note when it was chosen among several."""
    if path.is_file() or _has_events(path):
        return path, []
    runs = sorted({f.parent for f in path.glob(f"*/{EVENTS}")} | {f.parent for f in path.glob(f"*/*/{EVENTS}")})
    # one writer per split (run/train, run/val): the folder above them is the run
    runs = sorted({r.parent if _is_split_folder(r) else r for r in runs})
    # a run's add_scalars children live inside it: keep only the top-most folders
    runs = [r for r in runs if not any(o != r and o in r.parents for o in runs)]
    if path in runs:  # `path` itself is a run of split writers
        return path, []
    if not runs:
        raise DataError(
            f"No TensorBoard event files in {path}",
            path=path,
            causes=["the folder holds no events.out.tfevents.* file", "point at the run's log folder"],
        )
    if len(runs) == 1:
        return runs[0], [f"read the one run in {path}: {runs[0].relative_to(path)}"]
    newest = max(runs, key=lambda r: _newest(list(r.rglob(EVENTS))))
    others = len(runs) - 1
    return newest, [f"{len(runs)} runs in {path}; read the newest, {newest.relative_to(path)} ({others} other(s))"]


def _is_split_folder(folder: Path) -> bool:
    return folder.name.lower() in _SPLIT_FOLDERS


def _event_files(run: Path) -> list[tuple[Path, str | None]]:
    """(event file, tag prefix): the run's own files, then each add_scalars child's under its folder name."""
    if run.is_file():
        return [(run, None)]
    files: list[tuple[Path, str | None]] = [(f, None) for f in sorted(run.glob(EVENTS))]
    for child in sorted(d for d in run.iterdir() if d.is_dir() and _has_events(d)):
        files += [(f, child.name) for f in sorted(child.glob(EVENTS))]
    return files


def _reader(path: Path) -> RunScalars:
    """An empty reader of a run's scalars, with TensorBoard's `Event` protobuf class; DataError
    naming the extra when TensorBoard is not installed. numpy and the protobufs load here, on the
    first TensorBoard log read, not when a metrics log is followed."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:
        raise DataError(
            f"{path} is a TensorBoard log; reading it needs the optional extra: {EXTRA}", path=path
        ) from None
    from minigpt.logs.tensorboard_scalars import RunScalars

    return RunScalars(Event, _tag_in)


def read_tensorboard(path: str | os.PathLike, cap: int | None = None) -> TensorBoardLog:
    """The scalars of a TensorBoard run as a metrics log: a `TensorBoardLog`, with the tags read and
    which run of a parent folder (see the module docstring for the tags). A damaged record is
    skipped and named in the notes with the steps it may have lost; a last record still being
    written is left out without a note. `cap`: the points are a `CurveSample` of at most that many
    a field (exact below it; thinned above it, and the notes say so)."""
    path = Path(path)
    scalars = _reader(path)
    run, notes = _choose_run(path)
    while not (scalars.refresh(_event_files(run)) and scalars.read()):
        scalars = _reader(path)  # a file was replaced as it was read: read the run anew
    chosen, tag_notes = _choose_tags(scalars, run)
    log = TensorBoardLog(str(run), MetricPoints(), tags=chosen, notes=notes + tag_notes)
    if cap is None:
        for steps, columns in scalars.blocks(chosen, _POINT_FIELDS, _BLOCK):
            log.points.extend_columns(steps, columns)
        return log
    sample = CurveSample(cap=cap)
    for steps, columns in scalars.blocks(chosen, _POINT_FIELDS, _BLOCK):
        sample.add_columns(steps, columns)
    sampled_log(log, sample)
    return log


def _choose_tags(scalars: RunScalars, run: Path) -> tuple[dict[str, str], list[str]]:
    """(field -> the tag read for it, notes on what was read and what was not)."""
    tags = scalars.tags()
    notes = scalars.notes(run)
    chosen: dict[str, str] = {}
    for tag in tags:
        name = tag_field(tag)
        if name is not None and (name not in chosen or _rank(name, tag) < _rank(name, chosen[name])):
            chosen[name] = tag
    if "val_loss" not in chosen:
        tests = sorted((t for t in tags if _is_test_loss(t)), key=lambda t: _rank("val_loss", t))
        if tests:
            chosen["val_loss"] = tests[0]
            notes.append(f"read {tests[0]} as the validation loss (no val/eval tag)")
    if "train_loss" not in chosen and "val_loss" not in chosen:
        found = ", ".join(sorted(tags)[:20]) or "none"
        raise DataError(
            f"No loss scalars in the TensorBoard log {run}: scalar tags found: {found}",
            path=run,
            causes=notes
            + [
                "the run logs its loss under a tag without the word 'loss'",
                f"known tags: {', '.join(TAGS['train_loss'] + TAGS['val_loss'])}, or any tag with the word loss",
            ],
        )
    if "train_loss" not in chosen:  # only a val loss: that is the curve there is to judge
        chosen["train_loss"] = chosen.pop("val_loss")
        notes.append(f"no train-loss tag (found: {', '.join(sorted(tags)[:12])}); judged {chosen['train_loss']}")
    # a loss tag not judged is named, unless it is a per-epoch copy of one that is (Lightning's _epoch)
    judged = {frozenset(_words(t)) - {"step", "epoch"} for t in chosen.values()}
    unread = [
        t
        for t in sorted(tags)
        if "loss" in _words(t) and t not in chosen.values() and frozenset(_words(t)) - {"step", "epoch"} not in judged
    ]
    if unread:
        notes.append(f"loss tags not judged: {', '.join(unread[:8])}" + (" ..." if len(unread) > 8 else ""))
    return chosen, notes


def _new_points(scalars: RunScalars, chosen: dict[str, str]) -> list[MetricPoint]:
    """The points of the values read since `scalars.mark()`, one per step (a later value wins)."""
    by_step: dict[int, dict[str, float]] = {}
    for name, tag in chosen.items():
        steps, values = scalars.since_marked(tag)
        for step, value in zip(steps, values):
            by_step.setdefault(step, {})[name] = value
    return [MetricPoint(step, **named) for step, named in sorted(by_step.items())]


def _tag_in(folder: str | None, tag: str) -> str:
    """A scalar's tag as the run holds it: add_scalars("Loss", {"train": x}) writes tag `Loss` into
    the child folder `Loss_train` (the folder names it); a split writer (run/val) writes `loss` into
    `val`, read as `val/loss`."""
    if folder is None:
        return tag
    return folder if folder.startswith(f"{tag}_") else f"{folder}/{tag}"


class TensorBoardFollower:
    """Follows a TensorBoard run as its writer adds events, with a metrics follower's interface
    (`poll`, `reset`, `resets`, `pending_bytes`, `bad_lines`): each event file is read on from where
    the last poll left it, at most `max_bytes` a poll. Points that extend the ones given before come
    out as new points; a value for a step already given, a new tag chosen, a file replaced or
    another run of a parent folder chosen read the run anew and come out as a reset. `tags` and
    `notes` say how the run was read (the tags, damaged records skipped)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.reset = False
        self.resets = 0
        self.bad_lines = 0
        self.bad_line_numbers: list[int] = []
        self.pending_bytes = 0
        self.tags: dict[str, str] = {}
        self.notes: list[str] = []
        self._run: Path | None = None
        self._scalars: RunScalars | None = None
        self._signature: tuple = ()
        self._last_step: int | None = None  # the last step given; None: nothing given since a (re)start
        self._handing: Iterator[tuple[list[int], list[list[float | None]]]] | None = None  # a run's points, to give

    def _files(self) -> tuple:
        root = self.path
        files = [root] if root.is_file() else sorted(root.rglob(EVENTS))
        out = []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue  # removed between the listing and the stat
            out.append((str(f), st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(out)

    def poll(self, max_bytes: int | None = None) -> list[MetricPoint]:
        """The points added since the last poll (all of them after a reset); while a backlog is
        read (`pending_bytes`), none: a step is given once its file is read up to the writer. A
        whole run's points are given _HAND_OUT a poll, `pending_bytes` staying above 0 until the
        last, so that no poll of a long run takes long. Raises DataError as `read_tensorboard`
        does; a run with no event file yet gives nothing."""
        self.reset = False
        if self._handing is not None:
            return self._hand_on()
        signature = self._files()
        if signature == self._signature and not self.pending_bytes:
            return []
        self._signature = signature
        if not signature:
            return []
        run, run_notes = _choose_run(self.path)
        scalars = self._scalars
        if scalars is None or run != self._run or not scalars.refresh(_event_files(run)):
            scalars = self._start(run)
        if not scalars.read(max_bytes):
            scalars = self._start(run)
            scalars.read(max_bytes)
        self.pending_bytes = scalars.pending()
        if self.pending_bytes:
            return []
        chosen, notes = _choose_tags(scalars, run)
        self.notes = run_notes + notes
        if chosen == self.tags and self._last_step is not None:
            points = _new_points(scalars, chosen)
            if not points or points[0].step > self._last_step:
                scalars.mark()
                self._last_step = points[-1].step if points else self._last_step
                return points
        # a first reading, or one that changes what was given: all the points, from a reset
        had = self._last_step is not None
        self.tags, self._last_step = chosen, None
        self._handing = scalars.blocks(chosen, _POINT_FIELDS, _BLOCK)
        scalars.mark()
        points = self._hand_on()
        if had:
            self.reset = True
            self.resets += 1
        return points

    def _hand_on(self) -> list[MetricPoint]:
        """The next points of a whole run being given, at most about _HAND_OUT."""
        points: list[MetricPoint] = []
        for steps, columns in self._handing or ():
            points += [MetricPoint(*row) for row in zip(steps, *columns)]
            if len(points) >= _HAND_OUT:
                break
        else:
            self._handing = None
        if points:
            self._last_step = points[-1].step
        self.pending_bytes = 0 if self._handing is None else 1  # not bytes: points still to give
        return points

    def _start(self, run: Path) -> RunScalars:
        """A reader of `run` from its start (the run chosen anew, or a file replaced)."""
        self._run, self._scalars = run, _reader(self.path)
        self._scalars.refresh(_event_files(run))
        return self._scalars
