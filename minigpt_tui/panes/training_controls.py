"""The Loss pane's training line: ask the app to start `minigpt train` on the workspace, follow
the run, ask it to stop, and say how it ended.

The run is the app's (`minigpt_tui.training_session`): this line asks for it with
`TrainingRequested`/`TrainingStopRequested` and shows what `TrainingStarted`/`TrainingEnded` say.
Starting asks first when a run is there (a fresh run moves its files to previous/<time>/), naming
the command and what it moves. The keys (`s`/`t` to start, `x` to stop) are bound on the pane,
which has the focus, and come here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.message import Message
from textual.worker import Worker, WorkerState

from minigpt_tui.host import host, workspace_of
from minigpt_tui.messages import TrainingEnded, TrainingRequested, TrainingStarted, TrainingStopRequested
from minigpt_tui.train_args import DEFAULT_PRESET, TrainPlan
from minigpt_tui.training import LOG_NAME, OtherTrainer
from minigpt_tui.widgets.live_static import LiveStatic

if TYPE_CHECKING:
    from minigpt_tui.session import Session


@dataclass
class TrainingPlanned(Message):
    """The flags `s`/`t` would train with, read from the workspace (on a worker thread)."""

    plan: TrainPlan
    fault: str | None = None  # the fault injected into the checks, which the run does not get


class TrainingControls(LiveStatic):
    """One line (more when a run failed): the UI's own run, how the last one ended, or how `s` would
    start one. Its requests bubble to the app; the pane hands it the run's events (`show_started`,
    `show_ended`)."""

    # fixed flags after `minigpt train --workspace W` (tests); None: the workspace's own settings,
    # read from its checkpoint when `s`/`t` is pressed (minigpt_tui.train_args)
    train_args: list[str] | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__("", markup=False, **kwargs)
        self.asked = False  # a start was asked for and the app has not said how it went
        self.started: TrainingStarted | None = None  # the app's run, while it goes
        self.last_exit: TrainingEnded | None = None
        self.writer: OtherTrainer | None = None  # another process training the workspace
        self._shown: tuple | None = None

    def on_mount(self) -> None:
        self._render_training()

    @property
    def training(self) -> bool:
        """The app's run is starting or running, as far as its events have said."""
        return self.asked or self.started is not None

    @property
    def own_pid(self) -> int | None:
        """The app's run (read by the curve follower: this run is not "another trainer")."""
        return None if self.started is None else self.started.pid

    def start_training(self, args: list[str] | None = None) -> bool:
        """Ask the app to start `minigpt train` on this workspace with `args` (default: `train_args`,
        else the debug preset); False when one is already running."""
        if self.training:
            self.notify("training is already running (x stops it)", severity="warning")
            return False
        flags = args if args is not None else (self.train_args or ["--preset", DEFAULT_PRESET])
        self.asked, self.last_exit = True, None
        self.post_message(TrainingRequested([*flags, "--quiet"]))
        self._render_training("starting…")
        self.refresh_bindings()  # `x` shows in the footer while there is a run to stop
        return True

    def stop_training(self) -> bool:
        """Ask the app to stop its run (SIGINT, then SIGTERM and SIGKILL if it lingers)."""
        if not self.training:
            return False
        self.post_message(TrainingStopRequested())
        self._render_training("stopping…")
        return True

    def show_writer(self, writer: OtherTrainer | None) -> None:
        """Another process (`minigpt train` in another terminal) holds the workspace, or no longer."""
        self.writer = writer
        self._render_training()

    def show_started(self, message: TrainingStarted) -> None:
        self.asked, self.started = False, message
        self._render_training()

    def ask_to_train(self, writer: OtherTrainer | None) -> None:
        """Train with the workspace's own settings, unless `writer` (another process) is training
        it; ask first when a run is there, naming the command and the files it moves."""
        if self.training:
            self.start_training()  # says it is already running
            return
        if writer is not None:
            self.notify(f"training in progress (PID {writer.pid}): {writer.describe}", severity="warning")
            return
        ws = workspace_of(self)
        checkpoint = next((p for p in (ws.best_checkpoint, ws.latest_checkpoint) if p.is_file()), None)
        self._render_training("reading the workspace's training settings…")
        self._plan_training(Path(ws.root), checkpoint, self.train_args, host(self).session)

    @work(thread=True, exclusive=True, exit_on_error=False, group="loss-plan", name="training settings")
    def _plan_training(
        self, root: Path, checkpoint: Path | None, fixed: list[str] | None, session: Session | None
    ) -> None:
        from minigpt_tui.train_args import archived_files, plan_training

        fault = session.fault if session is not None else None  # here: building the check options may import torch
        if fixed is not None:
            plan = TrainPlan(list(fixed), "this pane's fixed flags", archived_files(root))
        else:
            plan = plan_training(root, checkpoint)  # reads the checkpoint: torch, so not on the UI thread
        self.post_message(TrainingPlanned(plan, fault))

    @on(TrainingPlanned)
    def _confirm_training(self, message: TrainingPlanned) -> None:
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
            f"First moved from {ws.root} to previous/<time>/ (nothing is deleted): {moved}."
            + (f" The injected fault {message.fault} does not apply to the training run." if message.fault else "")
        )
        self.app.push_screen(
            ConfirmScreen(question, yes="Start training", no="Cancel"),
            lambda yes: self._start_confirmed(plan.args) if yes else None,
        )

    def _start_confirmed(self, args: list[str]) -> None:
        self.start_training(args=args)

    def show_ended(self, message: TrainingEnded) -> None:
        self.asked, self.started, self.last_exit = False, None, message
        self._render_training()
        self.refresh_bindings()

    @on(Worker.StateChanged)
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        """The app notifies every failed worker; the line says where reading the settings failed."""
        if event.state != WorkerState.ERROR or event.worker.node is not self:
            return
        if event.worker.group == "loss-plan":
            error = f"{type(event.worker.error).__name__}: {event.worker.error}"
            self._render_training(f"could not read the training settings: {error}")

    def _render_training(self, note: str | None = None) -> None:
        text = training_text(self.training, self.started, self.last_exit, self.train_args, note, self.writer)
        key = (str(text), str(text.style))
        if key != self._shown:  # an update re-lays the screen out: only when the words changed
            self._shown = key
            self.update(text)


def training_text(
    training: bool,
    started: TrainingStarted | None,
    last_exit: TrainingEnded | None,
    train_args: list[str] | None,
    note: str | None,
    writer: OtherTrainer | None = None,
) -> Text:
    """The training line: the app's run (`training`: starting or running, `started` once it has a
    PID), another process's run (`writer`, which `s` would be refused beside), how the last one
    ended, or how `s` would start one."""
    if writer is not None and not training:
        return Text(f"training: in another process, {writer.describe} · s once it ends")
    if training:
        pid = started.pid if started is not None else "…"
        log = Path(started.log_path).name if started is not None else LOG_NAME
        return Text(f"training: RUNNING PID {pid} {note or ''}· log {log} · x stop")
    if last_exit is not None:
        e = last_exit
        ok = e.returncode == 0
        if e.stopped and not ok:
            what, ok = f"stopped from here (exit code {e.returncode})", True
        else:
            what = "finished (exit 0)" if ok else f"FAILED (exit code {e.returncode})"
        text = Text(f"training: {what} · log {Path(e.log_path).name} · s start again", style="" if ok else "bold red")
        tail = e.log_tail.splitlines()[-3:]
        if tail and not ok:
            text.append("\n" + "\n".join("  " + line for line in tail), style="dim")
        return text
    how = " ".join(train_args) if train_args else "the workspace's own settings"
    return Text(f"training: not started here · s start ({how}){' · ' + note if note else ''}")
