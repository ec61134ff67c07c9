"""Quitting while the UI's training run goes: the user is asked first (stop it and wait for it,
leave it running on its own, or stay), and the run is settled by the answer before the app exits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual.app import App

from minigpt_tui.screens.quit import QuitTrainingScreen
from minigpt_tui.training_session import TrainingSession


def ask(app: App, training: TrainingSession, answered: Callable[[str | None], Awaitable[None]]) -> None:
    """The question, once: a second q while it is shown does not stack another."""
    run = training.run
    if run is not None and not isinstance(app.screen, QuitTrainingScreen):
        app.push_screen(QuitTrainingScreen(run.pid, str(run.log_path)), answered)


async def settle(app: App, training: TrainingSession, choice: str | None) -> bool:
    """Do what the user chose with the app's run; True when the app is to quit now (not "cancel")."""
    run = training.run
    if choice == "cancel" or run is None:
        return False
    if choice == "leave":
        run.detach()
        app.notify(f"training left running (PID {run.pid})", markup=False)
    else:
        app.notify(f"stopping training (PID {run.pid})…", markup=False)
        await run.stop_and_wait()
    return True
