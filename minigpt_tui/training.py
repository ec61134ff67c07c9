"""The `minigpt train` subprocess the UI starts: one asyncio child process, no polling thread.

`TrainingRun.start()` runs `sys.executable -m minigpt train --workspace W ...` in its own session
(Ctrl+C in the terminal reaches the UI only), its output in `logs/tui_train.log`. `wait()` returns
a `TrainingExit` with the exit code and the log's last lines; `stop()` asks the trainer to stop
the way Ctrl+C would (SIGINT: it finishes the save in progress), then SIGTERM, then SIGKILL.
`detach()` leaves it running after the UI quits; the workspace lock names it next time.

Who else trains in a workspace comes from `minigpt.io.lock.holder` (`other_trainer`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "tui_train.log"
LOG_TAIL_BYTES = 4096
STOP_GRACE_S = (5.0, 5.0)  # SIGINT -> SIGTERM after the first, SIGTERM -> SIGKILL after the second


@dataclass(frozen=True)
class TrainingExit:
    """How a run ended: its exit code and the last lines of its log."""

    returncode: int
    log_path: str
    log_tail: str
    stopped: bool  # stopped from the UI (a non-zero code is then expected)


def train_command(workspace: str | os.PathLike, args: list[str]) -> list[str]:
    """The command line: this interpreter, the installed package, no PYTHONPATH tweak."""
    return [sys.executable, "-m", "minigpt", "train", "--workspace", str(workspace), *args]


def read_tail(path: Path, limit: int = 800) -> str:
    """The non-blank last lines of a log (at most `limit` characters; progress bars split on \\r)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL_BYTES))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror or exc})"
    lines = tail.replace("\r", "\n").splitlines()
    return "\n".join(line for line in lines if line.strip())[-limit:]


class TrainingRun:
    """One training subprocess. Create, `await start()`, then `await wait()` (once)."""

    def __init__(self, workspace: str | os.PathLike, args: list[str]) -> None:
        self.workspace = Path(workspace)
        self.args = list(args)
        self.log_path = self.workspace / "logs" / LOG_NAME
        self.process: asyncio.subprocess.Process | None = None
        self.stopped = False  # stop() was called
        self.detached = False
        self._escalation: asyncio.Task | None = None

    @property
    def command(self) -> list[str]:
        return train_command(self.workspace, self.args)

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        """Start the process (raises OSError when the interpreter cannot be run)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        from minigpt.cli import TAKE_SIGINT
        from minigpt.threads import child_env  # torch-free

        # one core left to the UI's own checks, unless the user set OMP_NUM_THREADS
        # stop() sends SIGINT: the child must take it even when this UI was started with SIGINT
        # ignored (`nohup … &`), which a child inherits (minigpt.cli.main restores it on this flag)
        env = dict(child_env("train", share_with=1), PYTHONUNBUFFERED="1", **{TAKE_SIGINT: "1"})
        with os.fdopen(self._open_log(), "wb") as log:  # the child keeps its own descriptor
            self.process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _open_log(self) -> int:
        """The log, emptied, never through a link or a FIFO (minigpt.io.files.open_regular). Its flock
        passes to the trainer with the descriptor: while another UI's run writes `tui_train.log`,
        this UI writes `tui_train.<pid>.log` instead of emptying the other's."""
        import fcntl

        from minigpt.io.files import open_regular

        for path in (self.log_path, self.log_path.with_name(f"tui_train.{os.getpid()}.log")):
            fd = open_regular(path, os.O_WRONLY | os.O_CREAT, what="the UI's training log")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            self.log_path = path
            return fd
        raise BlockingIOError(f"{self.log_path} and this UI's own log are both in use")

    async def wait(self) -> TrainingExit:
        assert self.process is not None, "start() first"
        code = await self.process.wait()
        if self._escalation is not None:
            self._escalation.cancel()
        tail = await asyncio.to_thread(read_tail, self.log_path)
        return TrainingExit(code, str(self.log_path), tail, self.stopped)

    def stop(self) -> bool:
        """Ask the run to stop (SIGINT, escalating); False when it is not running."""
        if not self.running:
            return False
        self.stopped = True
        self._signal(signal.SIGINT)
        if self._escalation is None:
            self._escalation = asyncio.get_running_loop().create_task(self._escalate())
        return True

    def interrupt(self) -> None:
        """SIGINT only, no escalation (the event loop is going away): the trainer stops at its next step."""
        if self.running:
            self.stopped = True
            self._signal(signal.SIGINT)

    async def stop_and_wait(self, timeout: float = sum(STOP_GRACE_S) + 2) -> int | None:
        """Stop and wait for the exit code (None if it outlived `timeout`)."""
        process = self.process
        if process is None or not self.stop():
            return None if process is None else process.returncode
        try:
            return await asyncio.wait_for(asyncio.shield(process.wait()), timeout)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            return None

    async def _escalate(self) -> None:
        for sig, grace in zip((signal.SIGTERM, signal.SIGKILL), STOP_GRACE_S):
            await asyncio.sleep(grace)
            if not self.running:
                return
            self._signal(sig)

    def _signal(self, sig: int) -> None:
        if self.process is None:
            return
        try:
            self.process.send_signal(sig)
        except ProcessLookupError:  # exited between the check and the signal
            pass

    def detach(self) -> None:
        """Leave the run going after the UI exits (it was started in its own session)."""
        if not self.running:
            return
        self.detached = True
        if self._escalation is not None:
            self._escalation.cancel()
        # nothing else to do: asyncio's child watcher holds the process until it exits, so it is
        # never collected (and killed) with the UI; tests/tui/test_live_training.py checks it lives on


@dataclass(frozen=True)
class OtherTrainer:
    """A training run that holds the workspace and that this UI did not start."""

    pid: int
    describe: str


def other_trainer(workspace: str | os.PathLike, own_pid: int | None = None) -> OtherTrainer | None:
    """Who holds the workspace's writer lock, unless it is `own_pid` (cheap: one small read)."""
    from minigpt.io.lock import holder

    found = holder(workspace)
    if found is None or (own_pid is not None and found.pid == own_pid):
        return None
    return OtherTrainer(found.pid, found.describe())
