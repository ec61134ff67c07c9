"""The UI's own training run, owned by the app: at most one `minigpt train` subprocess
(`minigpt_tui.training.TrainingRun`), started and stopped when a pane asks (`TrainingRequested`,
`TrainingStopRequested`), left running or stopped when the app quits, interrupted when the app
goes away without asking. What happens to it reaches the app as `TrainingStarted` and
`TrainingEnded`, which the app hands on to every pane: panes show the run, they never hold it."""

from __future__ import annotations

from pathlib import Path

from textual.app import App

from minigpt_tui.messages import TrainingEnded, TrainingStarted
from minigpt_tui.training import TrainingRun


class TrainingSession:
    """The app's training run and how the last one ended."""

    def __init__(self, app: App) -> None:
        self._app = app  # runs the supervising worker and hears the run's events
        self.run: TrainingRun | None = None  # the subprocess, once one was asked for
        self.last_exit: TrainingEnded | None = None  # how the newest run ended, once it has

    @property
    def training(self) -> bool:
        """A run started here is starting or running, and was not left to run on its own."""
        return self.run is not None and self.last_exit is None and not self.run.detached

    def start(self, workspace: Path, args: list[str]) -> bool:
        """Start `minigpt train --workspace workspace *args`; False when a run is already going."""
        if self.training:
            return False
        self.run = run = TrainingRun(workspace, args)
        self.last_exit = None
        self._app.run_worker(
            self._supervise(run), name="training run", group="training", exclusive=True, exit_on_error=False
        )
        return True

    async def _supervise(self, run: TrainingRun) -> None:
        try:
            await run.start()
            if run.pid is not None:
                self._app.post_message(TrainingStarted(run.pid, run.command, str(run.log_path)))
            end = await run.wait()
        except Exception as error:  # the run could not start or be waited for: it ended, say why
            self._ended(
                TrainingEnded(-1, str(run.log_path), f"could not run the training: {type(error).__name__}: {error}")
            )
            raise  # and the app's worker-error handler shows it
        self._ended(TrainingEnded(end.returncode, end.log_path, end.log_tail, end.stopped))

    def _ended(self, message: TrainingEnded) -> None:
        self.last_exit = message
        self._app.post_message(message)

    def stop(self) -> bool:
        """Ask the run to stop (SIGINT, then SIGTERM and SIGKILL if it lingers); False when none runs."""
        return self.training and self.run is not None and self.run.stop()

    def interrupt(self) -> None:
        """The app is going away without having asked (its event loop with it): SIGINT, no escalation."""
        if self.training and self.run is not None:
            self.run.interrupt()
