"""Pane 6: the training curve, followed live like `tail -f logs/metrics.jsonl`.

One thread owns the metrics file (`curve_follow.follow_curve`) and posts snapshots already shaped
by the pane's `LossView`; the `curve_rules.diagnose` verdict is computed on its own thread, and
`loss_text` words both. The follower posts at least once a second; when it falls silent or dies,
the pane says so, marks the plot as not updating and starts a new one. Training runs as a
subprocess owned by `minigpt_tui.training`; the samples by step (`v`) sit beside the plot.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.events import Resize
from textual.message import Message
from textual.widgets import Static
from textual.worker import Worker, WorkerState, get_current_worker

from minigpt.logs.curve import CurveDiagnosis, perplexity_text
from minigpt.logs.curve_rules import diagnose
from minigpt_tui.host import NoWorkspace, host, workspace_of
from minigpt_tui.messages import TrainingEnded, TrainingStarted
from minigpt_tui.panes.curve_follow import CurveDiagnosed, CurveUpdated, DiagnosisDue, follow_curve
from minigpt_tui.panes.loss_text import diagnosis_text, fmt, training_text
from minigpt_tui.train_args import DEFAULT_PRESET, TrainPlan
from minigpt_tui.training import OtherTrainer, TrainingRun
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.humanize import shorten_left
from minigpt_tui.widgets.loss_plot import (
    EMA_CHOICES,
    ZOOM_CHOICES,
    CurveSnapshot,
    LossPlot,
    LossView,
)
from minigpt_tui.widgets.samples_view import SamplesView

STALL_S = 5.0  # silent longer than this: the plot is marked as not updating


@dataclass
class TrainingPlanned(Message):
    """The flags `s`/`t` would train with, read from the workspace (on a worker thread)."""

    plan: TrainPlan


class LossPane(Vertical, RenderWhenShown):
    """Train/val loss against the log(V) baseline, learning rate, perplexity and the diagnosis."""

    DEFAULT_CSS = """
    LossPane { height: 1fr; }
    LossPane #loss-status, LossPane #train-status { height: auto; padding: 0 1; }
    LossPane #loss-diagnosis { height: auto; max-height: 4; padding: 0 1; }
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
    # fixed flags after `minigpt train --workspace W` (tests); None: the workspace's own settings,
    # read from its checkpoint when `s`/`t` is pressed (minigpt_tui.train_args)
    train_args: list[str] | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.points_count = 0
        self.resets = 0
        self.snapshot = CurveSnapshot()
        self.baseline: float | None = None
        self.diagnosis: CurveDiagnosis | None = None
        self.initial_load_s: float | None = None
        self.metrics_path: Path | None = None
        self.writer: OtherTrainer | None = None
        self.run: TrainingRun | None = None  # the UI's training subprocess, if it started one
        self.last_exit: TrainingEnded | None = None
        self.follower_error: str | None = None
        self.follower_restarts = 0
        # read by the follower thread; the UI thread only ever swaps whole immutable values in
        self.view = LossView()
        self.own_pid: int | None = None
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

    def compose(self) -> ComposeResult:
        yield Static("waiting for the metrics log...", id="loss-status", markup=False)
        with Horizontal(id="loss-row"):
            yield self._plot
            yield SamplesView(id="loss-samples")
        yield Static("", id="loss-diagnosis", markup=False)
        yield Static("", id="train-status", markup=False)

    def on_mount(self) -> None:
        self._render_training()
        self.set_interval(1.0, self._watch_follower)
        if host(self).workspace is not None:
            given = host(self).metrics_path  # --metrics; a TensorBoard log is for the checks only
            self.load_initial(given if given is not None and given.is_file() and "tfevents" not in given.name else None)
        else:
            self._show_text("loss-status", "no workspace: nothing to follow")

    def on_unmount(self) -> None:
        self.follow_stop.set()
        if self.training and self.run is not None:
            self.run.interrupt()  # the app asked "stop or leave it?" first; here nobody could answer
        for finished in self._finished:  # thread workers run on pooled threads: wait, do not join
            finished.wait(timeout=2)

    @on(Resize)
    def _pass_the_width(self, event: Resize) -> None:
        # the plot's width is read here, on the UI thread, and handed to the follower in the view
        width = max(10, self._plot.size.width or event.size.width)
        if width != self.view.width:
            self.view = dataclasses.replace(self.view, width=width)
        if self._last_message is not None:
            self._render_status(self._last_message)  # the path is cut to the new width
        verdict = diagnosis_text(self.diagnosis, self.snapshot, self._diagnosis_width())
        self._show_text("loss-diagnosis", verdict)  # re-cut to the new width

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
        self.writer = message.writer
        if message.changed or self._plot.stale:
            self._plot.show(snap, message.baseline, stale=False)
        self._render_status(message)
        self._show_text("loss-diagnosis", diagnosis_text(self.diagnosis, snap, self._diagnosis_width()))

    @on(DiagnosisDue)
    def _queue_diagnosis(self, message: DiagnosisDue) -> None:
        self._pending_diagnosis = message  # the newest wins; one diagnosis runs at a time
        if not self._diagnosing:
            self._next_diagnosis()

    def _next_diagnosis(self) -> None:
        due, self._pending_diagnosis = self._pending_diagnosis, None
        self._diagnosing = due is not None
        if due is not None:
            self._diagnose(due)

    @work(thread=True, exclusive=False, exit_on_error=False, group="loss-diagnose", name="curve diagnosis")
    def _diagnose(self, due: DiagnosisDue) -> None:
        started = time.perf_counter()
        points = due.columns.points()
        verdict = diagnose(points, baseline=due.baseline) if points else None
        self.post_message(CurveDiagnosed(verdict, due.generation, time.perf_counter() - started))

    @on(CurveDiagnosed)
    def _show_diagnosis(self, message: CurveDiagnosed) -> None:
        self.diagnosis_cost_s = message.seconds
        if message.generation == self._generation:
            self.diagnosis = message.diagnosis
            self._show_text("loss-diagnosis", diagnosis_text(self.diagnosis, self.snapshot, self._diagnosis_width()))
        self._next_diagnosis()

    def _state_words(self, message: CurveUpdated) -> str:
        if message.loading:
            return "loading"
        if self.training and self.run is not None and self.run.pid is not None:
            return f"training (PID {self.run.pid}, started here)"
        if message.writer is not None:
            return f"training in progress (PID {message.writer.pid})"
        if message.missing:
            return "waiting for"
        return "log growing" if message.growing else "idle, following"

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
            f"train last {fmt(last.get('train_loss'))} (ppl {perplexity_text(last.get('train_loss'))})",
            f"val {fmt(last.get('val_loss'))}",
            f"lr {fmt(last.get('lr'), '.1e')}",
        ]
        if message.baseline is not None:
            fields.append(f"log V {message.baseline:.2f}")
        if snap.bad_lines:
            fields.append(f"{snap.bad_lines} bad lines")
        if view:
            fields.append(view)
        line2 = " · ".join(fields)
        stale = bool(self.follower_error) or head.startswith("NOT")
        self._show_text("loss-status", Text(f"{line1}\n{line2}", style="bold red" if stale else ""))

    def _diagnosis_width(self) -> int:
        return max(40, (self.size.width or 80) - 2)

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
            if silent > 2 * STALL_S:  # still nothing: start a new one (exclusive: the old is cancelled)
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
            self._show_text("loss-diagnosis", Text(f"curve: diagnosis failed: {text}", style="bold red"))
            self._next_diagnosis()
        elif event.worker.group == "loss-train":
            log = str(self.run.log_path) if self.run is not None else "-"
            self.post_message(TrainingEnded(-1, log, f"could not run the training: {text}"))

    def _restart_after_error(self) -> None:
        self.follower_error = None
        self._start_follower()

    # -- view keys ----------------------------------------------------------------------------
    def _set_view(self, **changes) -> None:
        # no toast: it covered the plot's axis; the status line's last field names the view
        self.view = dataclasses.replace(self.view, **changes)

    def action_toggle_log(self) -> None:
        self._set_view(log_y=not self.view.log_y)

    def action_cycle_ema(self) -> None:
        i = EMA_CHOICES.index(self.view.ema) if self.view.ema in EMA_CHOICES else 0
        self._set_view(ema=EMA_CHOICES[(i + 1) % len(EMA_CHOICES)])

    def action_cycle_zoom(self) -> None:
        i = ZOOM_CHOICES.index(self.view.last_steps) if self.view.last_steps in ZOOM_CHOICES else 0
        self._set_view(last_steps=ZOOM_CHOICES[(i + 1) % len(ZOOM_CHOICES)])

    def action_toggle_previous(self) -> None:
        self._set_view(previous=not self.view.previous)

    # -- samples by step --------------------------------------------------------------------
    def action_toggle_samples(self) -> None:
        """`v`: the run's samples by step beside the plot (logs/samples.jsonl)."""
        if host(self).workspace is not None:
            self.query_one(SamplesView).toggle(Path(workspace_of(self).samples))

    # -- training subprocess ----------------------------------------------------------------
    @property
    def training(self) -> bool:
        """The UI's own run is starting or running."""
        return self.run is not None and self.last_exit is None and not self.run.detached

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "stop_training":
            return self.training  # `x` shows in the footer only while there is a run to stop
        return True

    def start_training(self, extra_args: list[str] | None = None, args: list[str] | None = None) -> bool:
        """Start `minigpt train` on this workspace with `args` (default: `train_args`, else the
        debug preset); False when one is already running."""
        if self.training:
            self.notify("training is already running (x stops it)", severity="warning")
            return False
        flags = args if args is not None else (self.train_args or ["--preset", DEFAULT_PRESET])
        self.run = TrainingRun(workspace_of(self).root, [*flags, "--quiet", *(extra_args or [])])
        self.last_exit = None
        self._supervise(self.run)
        self._render_training("starting…")
        self.refresh_bindings()
        return True

    @work(exclusive=True, exit_on_error=False, group="loss-train", name="training run")
    async def _supervise(self, run: TrainingRun) -> None:
        await run.start()
        self.own_pid = run.pid
        if run.pid is not None:
            self.post_message(TrainingStarted(run.pid, run.command))
        self._render_training()
        end = await run.wait()
        self.post_message(TrainingEnded(end.returncode, end.log_path, end.log_tail, end.stopped))

    def stop_training(self) -> bool:
        """Ask the training subprocess to stop (SIGINT, then SIGTERM and SIGKILL if it lingers)."""
        if not self.training or self.run is None or not self.run.stop():
            return False
        self._render_training("stopping…")
        return True

    def action_start_training(self) -> None:
        """Train with the workspace's own settings; ask first when a run is there (a fresh run
        moves it to previous/<time>/), naming the command and the files it moves."""
        if self.training:
            self.start_training()  # says it is already running
            return
        if self.writer is not None:
            self.notify(f"training in progress (PID {self.writer.pid}): {self.writer.describe}", severity="warning")
            return
        ws = workspace_of(self)
        checkpoint = next((p for p in (ws.best_checkpoint, ws.latest_checkpoint) if p.is_file()), None)
        self._render_training("reading the workspace's training settings…")
        self._plan_training(Path(ws.root), checkpoint, self.train_args)

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-plan", name="training settings")
    def _plan_training(self, root: Path, checkpoint: Path | None, fixed: list[str] | None) -> None:
        from minigpt_tui.train_args import TrainPlan, archived_files, plan_training

        if fixed is not None:
            plan = TrainPlan(list(fixed), "this pane's fixed flags", archived_files(root))
        else:
            plan = plan_training(root, checkpoint)  # reads the checkpoint: torch, so not on the UI thread
        self.post_message(TrainingPlanned(plan))

    @on(TrainingPlanned)
    def _ask_to_train(self, message: TrainingPlanned) -> None:
        plan = message.plan
        self._render_training()
        if not plan.archived:  # nothing to move aside: nothing to ask
            self.start_training(args=plan.args)
            return
        from minigpt_tui.screens.confirm import ConfirmScreen

        ws = workspace_of(self)
        moved = ", ".join(plan.archived[:6]) + (f" and {len(plan.archived) - 6} more" if len(plan.archived) > 6 else "")
        question = (
            f"Start a fresh training run?\n\nminigpt train {' '.join(plan.args)}\n({plan.origin})\n\n"
            f"First moved from {ws.root} to previous/<time>/ (nothing is deleted): {moved}. "
            "An injected fault does not apply to the training run."
        )
        self.app.push_screen(
            ConfirmScreen(question, yes="Start training", no="Cancel"),
            lambda yes: None if not yes else self._start_confirmed(plan.args),
        )

    def _start_confirmed(self, args: list[str]) -> None:
        self.start_training(args=args)

    def action_stop_training(self) -> None:
        if not self.stop_training():
            self.notify("no training run to stop")

    @on(TrainingEnded)
    def _show_training_end(self, message: TrainingEnded) -> None:
        self.last_exit = message
        self.own_pid = None
        session = host(self).session
        if session is not None:
            session.reload()  # a new checkpoint may exist: the next check or sample loads it
        self._render_training()
        self.refresh_bindings()

    def _render_training(self, note: str | None = None) -> None:
        run = self.run if self.training else None
        self._show_text("train-status", training_text(run, self.last_exit, self.train_args, note))
