"""Pane 6: the training curve, followed live like `tail -f logs/metrics.jsonl`.

One thread owns the metrics file (`curve_follow.follow_curve`) and posts snapshots already shaped
by the pane's `LossView`; the `curve_rules.diagnose` verdict is computed on its own thread, and
`loss_text` words both. The follower posts at least once a second; when it falls silent or dies,
the pane says so, marks the plot as not updating and starts a new one. The training line under it
(start, follow, stop a run from here) is `training_controls`; the samples by step (`v`) sit beside
the plot.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.widgets import Static
from textual.worker import Worker, WorkerState, get_current_worker

from minigpt.checks.watched import watch_settings
from minigpt.io.workspace import Workspace
from minigpt.logs.curve import CurveDiagnosis
from minigpt.logs.curve_rules import diagnose
from minigpt.logs.perplexity import perplexity_text
from minigpt.logs.tensorboard import is_tensorboard_path
from minigpt_tui.curve_store import EMA_CHOICES, ZOOM_CHOICES, CurveSnapshot, LossView
from minigpt_tui.host import NoWorkspace, host, workspace_of
from minigpt_tui.messages import TrainingEnded, TrainingStarted
from minigpt_tui.panes.curve_follow import (
    CurveDiagnosed,
    CurveUpdated,
    DiagnosisDue,
    follow_curve,
    has_previous_runs,
)
from minigpt_tui.panes.loss_text import diagnosis_more, diagnosis_text, fmt, fmt_loss_or_dash, pack_fields
from minigpt_tui.panes.training_controls import TrainingControls
from minigpt_tui.training import OtherTrainer
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.humanize import shorten_left
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.loss_plot import LossPlot
from minigpt_tui.widgets.samples_view import SamplesView

STALL_S = 5.0  # silent longer than this: the plot is marked as not updating
STUCK_FOLLOWERS_MAX = 2  # followers still reading at once: the first and one replacement


class LossPane(Vertical, RenderWhenShown):
    """Train/val loss against the log(V) baseline, learning rate, perplexity and the diagnosis."""

    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)

    DEFAULT_CSS = """
    LossPane { height: 1fr; }
    LossPane #loss-status, LossPane #train-status { height: auto; padding: 0 1; }
    LossPane #loss-diagnosis-box {
        height: auto; max-height: 4; padding: 0 1; scrollbar-size-vertical: 1; scrollbar-gutter: stable;
    }
    LossPane #loss-diagnosis { height: auto; }
    LossPane LossPlot { height: 1fr; min-height: 6; }
    LossPane #loss-row { height: 1fr; min-height: 6; }
    LossPane #loss-samples { display: none; width: 1fr; height: 1fr; border-left: solid $primary; padding: 0 1; }
    LossPane #loss-samples.shown { display: block; }
    """
    BINDINGS = [
        Binding("s", "start_training", "Train", show=False),  # `t` (the app's) is in the footer
        Binding("x", "stop_training", "Stop"),
        Binding("l", "toggle_log", "Log"),
        Binding("m", "cycle_ema", "EMA"),
        Binding("z", "cycle_zoom", "Zoom"),
        Binding("p", "toggle_previous", "Prev"),
        Binding("v", "toggle_samples", "Samples"),
    ]
    can_focus = True  # so the keys reach the pane when its tab is shown
    POLL_S = 0.25  # 4 Hz: tail -f latency, and the most often a snapshot is posted

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.points_count = 0
        self.resets = 0
        self.snapshot = CurveSnapshot()
        self.baseline: float | None = None
        self.diagnosis: CurveDiagnosis | None = None
        self.initial_load_s: float | None = None
        self.metrics_path: Path | None = None
        self.writer: OtherTrainer | None = None  # another process training this workspace
        self.controls = TrainingControls(id="train-status")
        self.follower_error: str | None = None
        self.follower_restarts = 0
        # read by the follower thread; the UI thread only ever swaps whole immutable values in
        self.view = LossView()
        self.view_note: str | None = None  # what the last view key did when the plot shows no change
        self.diagnosis_cost_s = 0.0  # the last diagnosis took this long: the follower asks less often
        self._generation = (0, 0)
        self._followers = 0
        self._diagnosing = False
        self._pending_diagnosis: DiagnosisDue | None = None
        self._heard_at = time.monotonic()
        self.follow_stop = threading.Event()
        self._finished: list[threading.Event] = []  # one per thread worker, set when it returns
        self._plot = LossPlot(id="loss-plot")
        self._last_message: CurveUpdated | None = None
        self._shown: dict[str, tuple] = {}  # widget id -> what it shows now
        self.read_notes: tuple[str, ...] = ()  # how the follower read the log (a TensorBoard run's tags)

    def compose(self) -> ComposeResult:
        yield LiveStatic("waiting for the metrics log...", id="loss-status", markup=False)
        with Horizontal(id="loss-row"):
            yield self._plot
            yield SamplesView(id="loss-samples")
        # the verdict's head in view, all of it under it: tab focuses it, the arrow keys scroll it
        with VerticalScroll(id="loss-diagnosis-box"):
            yield LiveStatic("", id="loss-diagnosis", markup=False)
        yield self.controls

    def on_mount(self) -> None:
        self.set_interval(1.0, self._watch_follower)
        if host(self).workspace is not None:
            given = host(self).metrics_path  # --metrics: a metrics JSONL or TensorBoard events, as the checks read it
            self.load_initial(given if given is not None and (given.is_file() or is_tensorboard_path(given)) else None)
        else:
            self._show_text("loss-status", "no workspace: nothing to follow")

    def on_unmount(self) -> None:
        self.follow_stop.set()
        for finished in self._finished:  # thread workers run on pooled threads: wait, do not join
            finished.wait(timeout=2)

    @on(LossPlot.WidthChanged)
    def _pass_the_width(self, event: LossPlot.WidthChanged) -> None:
        # the plot's width (the terminal's, less the samples beside it) is read here, on the UI
        # thread, and handed to the follower in the view: it downsamples to that many buckets
        width = max(10, event.width)
        if width != self.view.width:
            self.view = dataclasses.replace(self.view, width=width)

    @on(Resize)
    def _recut_the_text(self, event: Resize) -> None:
        if self._last_message is not None:
            self._render_status(self._last_message)  # the path is cut to the new width
        self._render_diagnosis()  # re-cut to the new width

    def _show_text(self, widget_id: str, text: Text | str) -> None:
        """Update a line only when its text changed: an update re-lays the screen out, and the
        follower's heartbeat would otherwise do that every second (pane switches got 2x slower)."""
        key = (str(text), getattr(text, "style", ""))
        if self._shown.get(widget_id) != key:
            self._shown[widget_id] = key
            # in a hidden tab, kept until the pane is shown (the newest text per line)
            self.render_when_shown(widget_id, lambda: self.query_one(f"#{widget_id}", Static).update(text))

    # -- following the log -------------------------------------------------------------------
    def load_initial(self, path: Path | None = None) -> None:
        """(Re)read the metrics log from the top, then follow it (the workspace's by default)."""
        ws = workspace_of(self)
        self.metrics_path = Path(path) if path is not None else Path(ws.metrics)
        self.initial_load_s = None
        self._start_follower()

    def _start_follower(self) -> None:
        ws = workspace_of(self)
        self._heard_at = time.monotonic()
        self._followers += 1
        self._follow(self.metrics_path, Path(ws.tokenizer), Path(ws.root), self._followers)

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-follow", name="loss follower")
    def _follow(self, path: Path, tokenizer_path: Path, root: Path, follower_id: int) -> None:
        finished = threading.Event()
        self._finished.append(finished)
        try:
            worker = get_current_worker()
            follow_curve(self, lambda: worker.is_cancelled, path, tokenizer_path, root, follower_id)
        finally:
            finished.set()

    @on(CurveUpdated)
    def show_curve(self, message: CurveUpdated) -> None:
        self._heard_at = time.monotonic()
        self.follower_error = None
        self.follower_restarts = 0
        self._last_message = message
        snap = message.snapshot
        self.snapshot, self.points_count, self.resets = snap, snap.n_points, message.resets
        self.baseline = message.baseline
        if message.generation != self._generation:  # another log (a fresh run): its verdict is to come
            self._generation, self.diagnosis = message.generation, None
        self.initial_load_s = message.initial_load_s
        if message.writer != self.writer:
            self.writer = message.writer
            self.controls.show_writer(message.writer)  # its line offers `s` only while no other process trains here
        self.read_notes = message.notes
        if message.changed or self._plot.stale:
            self._plot.show(snap, message.baseline, stale=False)
        self._render_status(message)
        self._render_diagnosis()

    @on(DiagnosisDue)
    def _queue_diagnosis(self, message: DiagnosisDue) -> None:
        self._pending_diagnosis = message  # the newest wins; one diagnosis runs at a time
        if not self._diagnosing:
            self._next_diagnosis()

    def _next_diagnosis(self) -> None:
        due, self._pending_diagnosis = self._pending_diagnosis, None
        self._diagnosing = due is not None
        if due is not None:
            self._diagnose(due, workspace_of(self))

    @work(thread=True, exclusive=False, exit_on_error=False, group="loss-diagnose", name="curve diagnosis")
    def _diagnose(self, due: DiagnosisDue, ws: Workspace) -> None:
        started = time.perf_counter()
        points = due.columns.points()
        # the advice the check gives: with the warmup and clipping a watched loop measured
        verdict = diagnose(points, baseline=due.baseline, settings=watch_settings(ws)) if points else None
        if verdict is not None and due.columns.note:  # a long log: the check's words for its downsample
            verdict.summary += f"; {due.columns.note}"
        self.post_message(CurveDiagnosed(verdict, due.generation, time.perf_counter() - started))

    @on(CurveDiagnosed)
    def _show_diagnosis(self, message: CurveDiagnosed) -> None:
        self.diagnosis_cost_s = message.seconds
        if message.generation == self._generation:
            self.diagnosis = message.diagnosis
            self._render_diagnosis()
        self._next_diagnosis()

    def _state_words(self, message: CurveUpdated) -> str:
        if message.loading:
            return "loading"
        own_pid = self.controls.own_pid
        if own_pid is not None:
            return f"training (PID {own_pid}, started here)"
        if message.writer is not None:
            return f"training in progress (PID {message.writer.pid})"
        if message.missing:
            return "waiting for"
        if message.growing:
            return "log growing"
        return "run ended, following" if message.ended else "idle, following"

    def _render_status(self, message: CurveUpdated) -> None:
        snap = message.snapshot
        last = snap.last
        try:
            shown = str(Path(self.metrics_path or "").relative_to(workspace_of(self).root))
        except (ValueError, NoWorkspace):
            shown = str(self.metrics_path)
        width = max(40, self.size.width - 2)
        if self.follower_error:
            head = f"NOT FOLLOWING: {self.follower_error}"
        elif time.monotonic() - self._heard_at > STALL_S:
            head = f"NOT UPDATING for {time.monotonic() - self._heard_at:.0f}s (restarting the follower)"
        else:
            head = self._state_words(message)
        step = "-" if snap.last_step is None else f"{snap.last_step:,}"
        tail = f" · step {step}"  # the point count is in the plot's title, drawn with the plot
        line1 = f"{head} {shorten_left(shown, max(12, width - len(head) - len(tail) - 1))}{tail}"
        view = snap.view.describe()
        fields = [
            f"train last {fmt_loss_or_dash(last.get('train_loss'))}{self._at(snap, 'train_loss')}"
            f" (ppl {perplexity_text(last.get('train_loss'))})",
            f"val {fmt_loss_or_dash(last.get('val_loss'))}{self._at(snap, 'val_loss')}",
            f"lr {fmt(last.get('lr'), '.1e')}",
        ]
        if message.baseline is not None:
            fields.append(f"log V {message.baseline:.2f}")
        if snap.bad_lines:
            fields.append(f"{snap.bad_lines} bad lines")
        if view:
            fields.append(view)
        if self.view_note:
            fields.append(self.view_note)
        line2 = "\n".join(pack_fields(fields, width))
        stale = bool(self.follower_error) or head.startswith("NOT")
        self._show_text("loss-status", Text(f"{line1}\n{line2}", style="bold red" if stale else ""))

    @staticmethod
    def _at(snap: CurveSnapshot, name: str) -> str:
        """The words " (step N)" for a value logged before the line's step (a val loss between
        evaluations): it is not the value at the step the line names."""
        at = snap.last_at.get(name)
        return "" if at is None or at == snap.last_step else f" (step {at:,})"

    def _diagnosis_width(self) -> int:
        return max(40, (self.size.width or 80) - 3)  # its padding and the scrollbar's column

    def _render_diagnosis(self, failure: Text | None = None) -> None:
        """The verdict's head (at most 4 rows) in view, and all of it under it, scrolled to."""
        width = self._diagnosis_width()
        head = failure or diagnosis_text(self.diagnosis, self.snapshot, width)
        more = None if failure else diagnosis_more(self.diagnosis, self.snapshot, width)
        if self.read_notes and not failure:  # what the log holds that the curve does not show
            read = Text("read: " + "; ".join(self.read_notes), style="dim")
            more = read if more is None else Text.assemble(more, "\n", read)
        rows = 4 if failure else len(head.plain.splitlines())  # each line of the head fits the width
        text = head if more is None else Text.assemble(head, "\n", more)
        key = (str(text), str(head.style), rows)
        if self._shown.get("loss-diagnosis") == key:
            return
        self._shown["loss-diagnosis"] = key

        def show() -> None:
            self.query_one("#loss-diagnosis-box").styles.max_height = rows
            self.query_one("#loss-diagnosis", Static).update(text)

        self.render_when_shown("loss-diagnosis", show)

    def _watch_follower(self) -> None:
        """1 Hz on the UI thread: a follower silent for STALL_S is marked and replaced."""
        if self.metrics_path is None or self.follower_error:
            return
        silent = time.monotonic() - self._heard_at
        if silent > STALL_S:
            self._plot.show(stale=True)
            if self._last_message is not None:
                self._render_status(self._last_message)
            else:  # hung before its first read: nothing to draw, but the pane must not look fine
                self._show_text(
                    "loss-status",
                    Text(
                        f"NOT UPDATING for {silent:.0f}s (restarting the follower) {self.metrics_path}",
                        style="bold red",
                    ),
                )
            # still nothing: start a new one (exclusive: the old is cancelled). A cancel cannot stop
            # a read in progress, so while two followers are still reading, a third would only add
            # a reader (on a large log, each restart piled another whole read on the last)
            reading = sum(not finished.is_set() for finished in self._finished)
            if silent > 2 * STALL_S and reading < STUCK_FOLLOWERS_MAX:
                self.follower_restarts += 1
                self._start_follower()

    @on(Worker.StateChanged)
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        """The app notifies every failed worker; here the pane says it too, and recovers."""
        if event.state != WorkerState.ERROR or event.worker.node is not self:
            return
        error = event.worker.error
        text = f"{type(error).__name__}: {error}"
        if event.worker.group == "loss-follow":
            delay = min(10.0, 2.0**self.follower_restarts)
            self.follower_restarts += 1
            self.follower_error = f"{text} (retrying in {delay:.0f}s)"
            self._plot.show(stale=True)
            if self._last_message is not None:
                self._render_status(self._last_message)
            else:
                self._show_text("loss-status", Text(f"NOT FOLLOWING: {text}", style="bold red"))
            self.set_timer(delay, self._restart_after_error)
        elif event.worker.group == "loss-diagnose":
            self._render_diagnosis(Text(f"curve: diagnosis failed: {text}", style="bold red"))
            self._next_diagnosis()

    def _restart_after_error(self) -> None:
        self.follower_error = None
        self._start_follower()

    # -- view keys ----------------------------------------------------------------------------
    def _set_view(self, note: str | None = None, **changes) -> None:
        # no toast: it covered the plot's axis; the status line names the view, and `note` says why
        # a key changed nothing on the plot
        self.view = dataclasses.replace(self.view, **changes)
        self.view_note = note
        if self._last_message is not None:
            self._render_status(self._last_message)

    def action_toggle_log(self) -> None:
        self._set_view(log_y=not self.view.log_y)

    def action_cycle_ema(self) -> None:
        i = EMA_CHOICES.index(self.view.ema) if self.view.ema in EMA_CHOICES else 0
        self._set_view(ema=EMA_CHOICES[(i + 1) % len(EMA_CHOICES)])

    def action_cycle_zoom(self) -> None:
        """`z`: the whole run, then the last 2000, 500 and 100 steps; a window as long as the run
        would show the same plot, so it is skipped, and a run too short for any says so."""
        snap = self.snapshot
        span = None if snap.first_step is None or snap.last_step is None else snap.last_step - snap.first_step
        choices = [z for z in ZOOM_CHOICES if z is None or span is None or z < span]
        i = choices.index(self.view.last_steps) if self.view.last_steps in choices else 0
        if len(choices) == 1:
            steps = "no steps yet" if span is None else f"{span:,} steps"
            self._set_view(note=f"z: the run spans {steps}, all of it shown", last_steps=None)
            return
        self._set_view(last_steps=choices[(i + 1) % len(choices)])

    def action_toggle_previous(self) -> None:
        ws = host(self).workspace
        root = None if ws is None else Path(ws.root)
        if not self.view.previous and (root is None or not has_previous_runs(root)):
            where = "no workspace" if root is None else f"nothing in {root / 'previous'}"
            self._set_view(note=f"p: no earlier runs to overlay ({where})")
            return
        self._set_view(previous=not self.view.previous)

    # -- samples by step --------------------------------------------------------------------
    def action_toggle_samples(self) -> None:
        """`v`: the run's samples by step beside the plot (logs/samples.jsonl)."""
        if host(self).workspace is not None:
            self.query_one(SamplesView).toggle(Path(workspace_of(self).samples))

    # -- training (its line and subprocess: panes.training_controls) ---------------------------
    @property
    def own_pid(self) -> int | None:
        return self.controls.own_pid

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "stop_training":
            return self.controls.training  # `x` shows in the footer only while there is a run to stop
        return True

    def action_start_training(self) -> None:
        self.controls.ask_to_train(self.writer)

    def action_stop_training(self) -> None:
        if not self.controls.stop_training():
            self.notify("no training run to stop")

    def toggle_training(self) -> None:
        """The app's `t`: stop the app's run while it goes, else ask to start one (as `x` and `s`)."""
        if self.controls.training:
            self.controls.stop_training()
        else:
            self.action_start_training()  # asks before moving an existing run aside

    @on(TrainingStarted)
    def _show_run_started(self, message: TrainingStarted) -> None:
        self.controls.show_started(message)

    @on(TrainingEnded)
    def _show_run_ended(self, message: TrainingEnded) -> None:
        self.controls.show_ended(message)
