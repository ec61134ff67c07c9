"""The Loss pane's training line: start `minigpt train` on the workspace from the UI, follow it,
stop it, and say how it ended.

The run is a subprocess owned by `minigpt_tui.training`. Starting asks first when a run is there
(a fresh run moves its files to previous/<time>/), naming the command and what it moves. The keys
(`s`/`t` to start, `x` to stop) are bound on the pane, which has the focus, and come here.
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
from minigpt_tui.messages import TrainingEnded, TrainingStarted
from minigpt_tui.train_args import DEFAULT_PRESET, TrainPlan
from minigpt_tui.training import OtherTrainer, TrainingRun
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
    start one. It posts `TrainingStarted`/`TrainingEnded`, which bubble to the pane and the app."""

    # fixed flags after `minigpt train --workspace W` (tests); None: the workspace's own settings,
    # read from its checkpoint when `s`/`t` is pressed (minigpt_tui.train_args)
    train_args: list[str] | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__("", markup=False, **kwargs)
        self.run: TrainingRun | None = None  # the UI's training subprocess, if it started one
        self.last_exit: TrainingEnded | None = None
        self.own_pid: int | None = None  # read by the curve follower: this run is not "another trainer"
        self._shown: tuple | None = None

    def on_mount(self) -> None:
        self._render_training()

    def on_unmount(self) -> None:
        if self.training and self.run is not None:
            self.run.interrupt()  # the app asked "stop or leave it?" first; here nobody could answer

    @property
    def training(self) -> bool:
        """The UI's own run is starting or running."""
        return self.run is not None and self.last_exit is None and not self.run.detached

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
        self.refresh_bindings()  # `x` shows in the footer while there is a run to stop
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

    @on(TrainingEnded)
    def _show_training_end(self, message: TrainingEnded) -> None:
        self.last_exit = message
        self.own_pid = None
        session = host(self).session
        if session is not None:
            session.reload()  # a new checkpoint may exist: the next check or sample loads it
        self._render_training()
        self.refresh_bindings()

    @on(Worker.StateChanged)
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        """The app notifies every failed worker; a run that could not start ends here, said so."""
        if event.state != WorkerState.ERROR or event.worker.node is not self:
            return
        error = f"{type(event.worker.error).__name__}: {event.worker.error}"
        if event.worker.group == "loss-train":
            log = str(self.run.log_path) if self.run is not None else "-"
            self.post_message(TrainingEnded(-1, log, f"could not run the training: {error}"))
        elif event.worker.group == "loss-plan":
            self._render_training(f"could not read the training settings: {error}")

    def _render_training(self, note: str | None = None) -> None:
        run = self.run if self.training else None
        text = training_text(run, self.last_exit, self.train_args, note)
        key = (str(text), str(text.style))
        if key != self._shown:  # an update re-lays the screen out: only when the words changed
            self._shown = key
            self.update(text)


def training_text(
    run: TrainingRun | None, last_exit: TrainingEnded | None, train_args: list[str] | None, note: str | None
) -> Text:
    """The training line: the UI's own run (`run`, while it goes), how the last one ended, or how `s`
    would start one."""
    if run is not None:
        pid = run.pid if run.pid is not None else "…"
        return Text(f"training: RUNNING PID {pid} {note or ''}· log {run.log_path.name} · x stop")
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
