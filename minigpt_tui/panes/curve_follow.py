"""Following the metrics log for the Loss pane, on its own thread: `follow_curve` polls
`MetricsFollower` (4 Hz when caught up, as fast as it can while loading a long log), keeps the
curve in a `CurveStore` (bounded, however long the log), and posts snapshots already shaped by
the pane's current `LossView` (width, log scale, EMA, zoom, earlier runs) with who is writing the
workspace, and asks for a
diagnosis when new points arrived. It never touches a widget: the UI thread hands it the view as
an immutable value (`CurveListener.view`) and reads only the messages it posts."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from textual.message import Message

from minigpt.logs.curve import CurveDiagnosis
from minigpt.logs.curve_sample import sample_metrics
from minigpt.logs.sources import run_follower
from minigpt_tui.curve_store import CurveColumns, CurveSnapshot, CurveStore, LossView, downsample
from minigpt_tui.training import OtherTrainer, other_trainer

CHUNK_BYTES = 4 << 20  # per read while catching up: the UI gets a progress snapshot between chunks
HEARTBEAT_S = 1.0  # the follower posts at least this often, new data or not
GROWING_S = 10.0  # the log grew this recently (since its first read, not as its writer left): a run writes it
WRITER_CHECK_S = 1.0  # who holds the workspace lock, read this often
PREVIOUS_RUNS = 3  # earlier runs overlaid by `p`, newest first


@dataclass
class CurveUpdated(Message):
    """The whole current state of the curve: a newer one supersedes any still queued."""

    snapshot: CurveSnapshot
    changed: bool  # the snapshot differs from the last one posted (else a heartbeat)
    baseline: float | None
    resets: int
    loading: bool  # still reading a backlog
    initial_load_s: float | None  # how long the first full read of the file took
    writer: OtherTrainer | None  # who holds the workspace lock (not the UI's own run)
    growing: bool  # the log grew within GROWING_S
    missing: bool  # the metrics file is not there (yet, or moved aside by a fresh run)
    generation: tuple[int, int]  # (follower, log reset): a diagnosis of another one is stale
    ended: bool = False  # a run was seen writing (holding the lock, or the UI's own) and has stopped
    notes: tuple[str, ...] = ()  # how the log was read (a TensorBoard run's tags, and those left unread)

    def can_replace(self, message: Message) -> bool:
        # a heartbeat must not swallow a queued change: it would carry no redraw
        return isinstance(message, CurveUpdated) and (self.changed or not message.changed)


@dataclass
class DiagnosisDue(Message):
    """New points since the last diagnosis: diagnose the curve so far (on its own thread)."""

    columns: CurveColumns
    baseline: float | None
    generation: tuple[int, int]

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, DiagnosisDue)


@dataclass
class CurveDiagnosed(Message):
    diagnosis: CurveDiagnosis | None
    generation: tuple[int, int]
    seconds: float


class CurveListener(Protocol):
    """What the follower reads from the pane it follows for (plain values the UI thread swaps whole)."""

    POLL_S: float
    view: LossView
    diagnosis_cost_s: float  # the last diagnosis took this long: ask less often
    follow_stop: threading.Event

    @property
    def own_pid(self) -> int | None: ...  # the UI's own training run: not "another trainer"

    def post_message(self, message: Message) -> bool: ...


def vocab_baseline(tokenizer_path: Path) -> float | None:
    """log(V), the loss of a uniform guess, from the workspace's tokenizer (None when unreadable)."""
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.errors import MiniGPTError

    try:
        vocab = CharTokenizer.from_file(tokenizer_path).vocab_size
    except MiniGPTError:
        return None
    return math.log(vocab) if vocab else None


def has_previous_runs(root: Path) -> bool:
    """Whether the workspace keeps an earlier run's metrics log for `p` to overlay."""
    return next((root / "previous").glob("*/logs/metrics.jsonl"), None) is not None


def previous_runs(root: Path, width: int, limit: int = PREVIOUS_RUNS) -> list[tuple[str, list, list]]:
    """(folder name, steps, train loss) of the newest earlier runs in previous/<time>/logs/."""
    from minigpt.errors import MiniGPTError

    found = sorted((root / "previous").glob("*/logs/metrics.jsonl"), reverse=True)[:limit]
    out = []
    for path in found:
        try:
            log = sample_metrics(path)  # bounded, however long that run was
        except MiniGPTError:
            continue  # an unreadable old log is simply not overlaid
        xs, ys = log.points.series("train_loss")
        out.append((path.parents[1].name, *downsample(xs, ys, max(1, width))))
    return out


def follow_curve(
    pane: CurveListener,
    is_cancelled: Callable[[], bool],
    path: Path,
    tokenizer_path: Path,
    root: Path,
    follower_id: int,
) -> None:
    """Follow `path` until cancelled or `pane.follow_stop` is set, posting `CurveUpdated` snapshots shaped by
    `pane.view` and `DiagnosisDue` when new points wait for a verdict (runs on the follower thread)."""
    baseline = vocab_baseline(tokenizer_path)
    store, follower = CurveStore(), run_follower(path)
    started = time.perf_counter()
    initial_load_s = None
    diag_stale, diag_due = False, 0.0
    last_post, post_cost, view_seen, dirty = 0.0, 0.0, None, True
    writer, writer_due, grew_at = None, 0.0, -math.inf
    writing, left_at = False, -math.inf  # a run writes the log (another's or the UI's own); when it stopped
    prev_runs: list = []
    prev_due, snap = 0.0, None
    while not is_cancelled() and not pane.follow_stop.is_set():
        points = follower.poll(max_bytes=CHUNK_BYTES)
        now = time.monotonic()
        missing = not path.exists()
        if follower.reset or (missing and store.n_points):  # a fresh run moved the old log aside
            store.clear()
            dirty = True
        if points:
            store.extend(points)
            dirty = diag_stale = True
            if initial_load_s is not None:  # lines written since the first read, not the backlog
                grew_at = now
        loading = follower.pending_bytes > 0
        if not loading and initial_load_s is None:
            initial_load_s = time.perf_counter() - started
        view = pane.view  # one read: the UI thread swaps whole values
        if now >= writer_due:
            writer, writer_due = other_trainer(root, pane.own_pid), now + WRITER_CHECK_S
            was_writing, writing = writing, writer is not None or pane.own_pid is not None
            if was_writing and not writing:
                left_at = now
        if view.previous and now >= prev_due:
            runs = previous_runs(root, view.width)
            dirty = dirty or runs != prev_runs
            prev_runs, prev_due = runs, now + 5.0
        due_diag = diag_stale and not loading and now >= diag_due
        changed = dirty or view != view_seen
        min_gap = max(1.0 if loading else pane.POLL_S, 4 * post_cost)  # a backlog: progress at 1 Hz
        generation = (follower_id, follower.resets)
        if (changed or now - last_post >= HEARTBEAT_S) and now - last_post >= min_gap:
            if changed or snap is None:
                t0 = time.monotonic()
                snap = store.snapshot(view, follower.bad_lines)
                snap.previous = prev_runs if view.previous else []
                post_cost = time.monotonic() - t0
            # lines read within a lock check of the writer leaving are its last ones, not a new run's
            growing = now - grew_at < GROWING_S and grew_at > left_at + WRITER_CHECK_S
            pane.post_message(
                CurveUpdated(
                    snap,
                    changed,
                    baseline,
                    follower.resets,
                    loading,
                    initial_load_s,
                    writer,
                    growing,
                    missing,
                    generation,
                    ended=left_at > -math.inf and not writing and not growing,
                    notes=tuple(follower.notes),
                )
            )
            last_post, view_seen, dirty = now, view, False
        if due_diag:  # diagnosed on its own thread: a long log's verdict never stalls the plot
            pane.post_message(DiagnosisDue(store.columns(), baseline, generation))
            diag_stale, diag_due = False, now + max(1.0, 5 * pane.diagnosis_cost_s)  # big logs: less often
        if not loading:
            pane.follow_stop.wait(pane.POLL_S)
