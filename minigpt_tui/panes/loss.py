"""Pane 6: the training curve, followed live like `tail -f logs/metrics.jsonl`.

One thread owns the metrics file: it polls `MetricsFollower` (4 Hz when caught up, as fast as it
can while loading a long log), keeps every point in a `CurveStore`, and posts snapshots already
downsampled to the plot's width, with the `curve.diagnose` verdict. The pane can also start and
stop `minigpt train` as a subprocess, so a crash there never takes the UI down.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Sparkline, Static
from textual.worker import get_current_worker

from minigpt.curve import CurveDiagnosis, MetricsFollower, diagnose

from ..widgets.loss_plot import CurveSnapshot, CurveStore, LossPlot

CHUNK_BYTES = 4 << 20  # per read while catching up: the UI gets a progress snapshot between chunks
LOG_TAIL_BYTES = 4096


@dataclass
class CurveUpdated(Message):
    """The whole current state of the curve: a newer one supersedes any still queued."""

    snapshot: CurveSnapshot
    baseline: float | None
    diagnosis: CurveDiagnosis | None
    resets: int
    loading: bool  # still reading a backlog
    initial_load_s: float | None  # how long the first full read of the file took

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CurveUpdated)


@dataclass
class TrainingEnded(Message):
    """The training subprocess exited (by itself, by a crash, or stopped from the pane)."""

    returncode: int
    log_path: str
    log_tail: str


def _vocab_baseline(tokenizer_path: Path) -> float | None:
    """log(V), the loss of a uniform guess, from the workspace's tokenizer (None when unreadable)."""
    from minigpt.errors import MiniGPTError
    from minigpt.tokenizer import CharTokenizer

    try:
        vocab = CharTokenizer.from_file(tokenizer_path).vocab_size
    except MiniGPTError:
        return None
    return math.log(vocab) if vocab else None


def _ppl(loss: float | None) -> str:
    if loss is None or not math.isfinite(loss):
        return "-"
    return f"{math.exp(loss):.2f}" if loss < 700 else "inf"


def _fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else (f"{x:{spec}}" if math.isfinite(x) else str(x))


class LossPane(Vertical):
    """Train/val loss against the log(V) baseline, learning rate, perplexity and the diagnosis."""

    DEFAULT_CSS = """
    LossPane { height: 1fr; }
    LossPane #loss-status, LossPane #loss-diagnosis, LossPane #train-status { height: auto; padding: 0 1; }
    LossPane LossPlot { height: 1fr; min-height: 8; }
    LossPane #lr-row { height: 1; padding: 0 1; }
    LossPane #lr-label { width: auto; }
    LossPane Sparkline { width: 1fr; height: 1; }
    """
    BINDINGS = [
        Binding("s", "start_training", "Start training"),
        Binding("x", "stop_training", "Stop training"),
    ]
    can_focus = True  # so `s` / `x` reach the pane when its tab is shown
    POLL_S = 0.25  # 4 Hz: tail -f latency, and the most often a snapshot is posted
    train_args: list[str] = ["--preset", "debug"]  # appended after `minigpt train --workspace W`

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.points_count = 0
        self.resets = 0
        self.snapshot = CurveSnapshot()
        self.baseline: float | None = None
        self.diagnosis: CurveDiagnosis | None = None
        self.initial_load_s: float | None = None
        self.metrics_path: Path | None = None
        self.last_exit: TrainingEnded | None = None
        self._proc: subprocess.Popen | None = None
        self._train_log: Path | None = None
        self._stopped_by_user = False
        self._stop = threading.Event()
        self._finished: list[threading.Event] = []  # one per thread worker, set when it returns
        self._plot = LossPlot(id="loss-plot")

    def compose(self) -> ComposeResult:
        yield Static("waiting for the metrics log...", id="loss-status", markup=False)
        yield self._plot
        with Horizontal(id="lr-row"):
            yield Static("lr -", id="lr-label", markup=False)
            yield Sparkline([], id="lr-spark")
        yield Static("", id="loss-diagnosis", markup=False)
        yield Static("", id="train-status", markup=False)

    def on_mount(self) -> None:
        self._render_training()
        if getattr(self.app, "workspace", None) is not None:
            self.load_initial()
        else:
            self.query_one("#loss-status", Static).update("no workspace: nothing to follow")

    def on_unmount(self) -> None:
        self._stop.set()
        if self.training:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        for finished in self._finished:  # thread workers run on pooled threads: wait, do not join
            finished.wait(timeout=2)

    # -- following the log -------------------------------------------------------------------
    def load_initial(self, path: Path | None = None) -> None:
        """(Re)read the metrics log from the top, then follow it (the workspace's by default)."""
        ws = self.app.workspace
        self.metrics_path = Path(path) if path is not None else Path(ws.metrics)
        self.initial_load_s = None
        self._follow(self.metrics_path, Path(ws.tokenizer))

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-follow")
    def _follow(self, path: Path, tokenizer_path: Path) -> None:
        finished = threading.Event()
        self._finished.append(finished)
        try:
            self._follow_loop(get_current_worker(), path, tokenizer_path)
        finally:
            finished.set()

    def _follow_loop(self, worker, path: Path, tokenizer_path: Path) -> None:
        baseline = _vocab_baseline(tokenizer_path)
        store, follower = CurveStore(), MetricsFollower(path)
        started = time.perf_counter()
        initial_load_s = None
        diag, diag_stale, diag_due = None, False, 0.0
        last_post, post_cost, width_seen, dirty = 0.0, 0.0, None, True
        while not worker.is_cancelled and not self._stop.is_set():
            points = follower.poll(max_bytes=CHUNK_BYTES)
            if follower.reset:
                store.clear()
                diag, dirty = None, True
            if points:
                store.extend(points)
                dirty = diag_stale = True
            loading = follower.pending_bytes > 0
            if not loading and initial_load_s is None:
                initial_load_s = time.perf_counter() - started
            now = time.perf_counter()
            width = max(10, self._plot.size.width)
            due_diag = diag_stale and not loading and now >= diag_due
            min_gap = max(1.0 if loading else self.POLL_S, 4 * post_cost)  # a backlog: progress at 1 Hz
            if (dirty or width != width_seen or due_diag) and now - last_post >= min_gap:
                snap = store.snapshot(width, follower.bad_lines)
                post_cost = time.perf_counter() - now
                if due_diag:
                    t0 = time.perf_counter()
                    diag = diagnose(store.points(), baseline=baseline) if store.n_points else None
                    cost = time.perf_counter() - t0
                    diag_stale, diag_due = False, time.perf_counter() + max(1.0, 5 * cost)  # big logs: less often
                self.post_message(CurveUpdated(snap, baseline, diag, follower.resets, loading, initial_load_s))
                last_post, width_seen, dirty = now, width, False
            if not loading:
                self._stop.wait(self.POLL_S)

    @on(CurveUpdated)
    def show_curve(self, message: CurveUpdated) -> None:
        snap = message.snapshot
        self.snapshot, self.points_count, self.resets = snap, snap.n_points, message.resets
        self.baseline, self.diagnosis = message.baseline, message.diagnosis
        self.initial_load_s = message.initial_load_s
        self._plot.show(snap, message.baseline)
        last = snap.last
        state = "loading" if message.loading else "following"
        bad = f" | {snap.bad_lines} bad lines" if snap.bad_lines else ""
        base = f" | log V {message.baseline:.3f}" if message.baseline is not None else ""
        try:
            shown = self.metrics_path.relative_to(self.app.workspace.root)
        except (ValueError, AttributeError):
            shown = self.metrics_path
        status = (
            f"{state} {shown} | {snap.n_points:,} points | step {snap.last_step if snap.last_step is not None else '-'}"
            f" | train {_fmt(last.get('train_loss'))} (ppl {_ppl(last.get('train_loss'))})"
            f" | val {_fmt(last.get('val_loss'))} (ppl {_ppl(last.get('val_loss'))}){base}{bad}"
        )
        self.query_one("#loss-status", Static).update(Text(status))
        self.query_one("#lr-label", Static).update(Text(f"lr {_fmt(last.get('lr'), '.2e')} "))
        self.query_one(Sparkline).data = snap.series.get("lr", ([], []))[1]
        self.query_one("#loss-diagnosis", Static).update(self._diagnosis_text(message.diagnosis, snap))

    @staticmethod
    def _diagnosis_text(d: CurveDiagnosis | None, snap: CurveSnapshot) -> Text:
        if d is None:
            return Text("curve: no data yet" if not snap.n_points else "curve: diagnosing...")
        ok = d.shape == "healthy"
        text = Text(f"curve {'OK' if ok else '!!'} {d.summary}", style="" if ok else "bold yellow")
        if not ok and d.fixes:
            text.append(f"\n  try: {'; '.join(d.fixes[:2])}", style="")
        return text

    # -- training subprocess ----------------------------------------------------------------
    @property
    def training(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start_training(self, extra_args: list[str] | None = None) -> bool:
        """Start `minigpt train` on this workspace; False when one is already running."""
        if self.training:
            self.notify("training is already running (x stops it)", severity="warning")
            return False
        root = Path(self.app.workspace.root)
        (root / "logs").mkdir(parents=True, exist_ok=True)
        self._train_log = root / "logs" / "tui_train.log"
        package_parent = str(Path(__import__("minigpt").__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
        cmd = [
            sys.executable,
            "-m",
            "minigpt",
            "train",
            "--workspace",
            str(root),
            *self.train_args,
            "--quiet",
            *(extra_args or []),
        ]
        with open(self._train_log, "wb") as log:
            self._proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )  # own session: ctrl+c hits the UI only
        self.last_exit, self._stopped_by_user = None, False
        self._watch_training(self._proc, self._train_log)
        self._render_training()
        return True

    def stop_training(self) -> bool:
        """Terminate the training subprocess (killed if it has not exited 5 s later)."""
        if not self.training:
            return False
        self._stopped_by_user = True
        self._proc.terminate()
        proc = self._proc
        self.set_timer(5, lambda: proc.poll() is None and proc.kill())
        self._render_training("stopping...")
        return True

    def action_start_training(self) -> None:
        """Ask first when a run is already there: a fresh run moves it to previous/<time>/."""
        if self.training:
            self.start_training()  # says it is already running
            return
        ws = self.app.workspace
        if not (ws.best_checkpoint.exists() or ws.latest_checkpoint.exists()):
            self.start_training()
            return
        from ..screens.confirm import ConfirmScreen

        question = (
            f"Start a fresh training run ({' '.join(self.train_args)})?\n\nThe current checkpoints and "
            f"logs of {ws.root} move to previous/<time>/ first (nothing is deleted). "
            "An injected fault does not apply to the training run."
        )
        self.app.push_screen(
            ConfirmScreen(question, yes="Start training", no="Cancel"),
            lambda yes: self.start_training() if yes else None,
        )

    def action_stop_training(self) -> None:
        if not self.stop_training():
            self.notify("no training run to stop")

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-train-watch")
    def _watch_training(self, proc: subprocess.Popen, log_path: Path) -> None:
        finished = threading.Event()
        self._finished.append(finished)
        try:
            self._wait_for_exit(get_current_worker(), proc, log_path)
        finally:
            finished.set()

    def _wait_for_exit(self, worker, proc: subprocess.Popen, log_path: Path) -> None:
        while proc.poll() is None:
            if worker.is_cancelled or self._stop.is_set():
                return  # on_unmount terminates the process
            try:
                proc.wait(timeout=0.25)
            except subprocess.TimeoutExpired:
                pass
        try:
            with open(log_path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
                tail = f.read().decode("utf-8", errors="replace")
        except OSError as exc:
            tail = f"(cannot read {log_path}: {exc})"
        lines = tail.replace("\r", "\n").splitlines()
        self.post_message(
            TrainingEnded(proc.returncode, str(log_path), "\n".join(ln for ln in lines if ln.strip())[-800:])
        )

    @on(TrainingEnded)
    def _show_training_end(self, message: TrainingEnded) -> None:
        self.last_exit = message
        session = getattr(self.app, "session", None)
        if session is not None:
            session.reload()  # a new checkpoint may exist: the next check or sample loads it
        self._render_training()

    def _render_training(self, note: str | None = None) -> None:
        if self.training:
            text = Text(f"training: RUNNING pid {self._proc.pid} {note or ''} | log {self._train_log} | [x] stop")
        elif self.last_exit is not None:
            e = self.last_exit
            ok = e.returncode == 0
            if self._stopped_by_user and not ok:
                what, ok = f"stopped from here (exit code {e.returncode})", True
            else:
                what = "finished (exit 0)" if ok else f"FAILED (exit code {e.returncode})"
            text = Text(f"training: {what} | log {e.log_path} | [s] start again", style="" if ok else "bold red")
            tail = e.log_tail.splitlines()[-4:]
            if tail:
                text.append("\n" + "\n".join("  " + line for line in tail), style="dim")
        else:
            text = Text(f"training: not running | [s] start ({' '.join(self.train_args)}) | [x] stop")
        self.query_one("#train-status", Static).update(text)
