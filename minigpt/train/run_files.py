"""What a training run writes beside its checkpoints, and the order it writes it in: the metrics
log (its lines are `minigpt.logs.record`'s), `logs/grads.jsonl`, samples by step, the previous run
moved aside before a fresh one starts, temp files a killed save left, and the logs cut back to the
step a resume starts from. Everything that fails here on its own (a sample, an unreadable line) is
a notice, never the end of the run; `interrupts_deferred` holds back Ctrl+C while a log line and its
checkpoint land together."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import MiniGPTError
from minigpt.io.atomic import atomic_open, atomic_write_text
from minigpt.io.files import open_log
from minigpt.io.workspace import Workspace, archive_run
from minigpt.logs.record import json_line
from minigpt.logs.samples import SampleRecord, record_line
from minigpt.logs.trim import trim_log
from minigpt.sample.generate import draw_sample


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Hold back SIGINT until the block ends, so a save and its log line land together (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        if callable(previous):
            previous(signal.SIGINT, None)  # the default handler raises KeyboardInterrupt here
        elif previous == signal.SIG_DFL:
            signal.raise_signal(signal.SIGINT)


class RunFiles:
    """The workspace's logs as one run writes them; `notify` takes the notices (the trainer's on_notice)."""

    def __init__(self, ws: Workspace, notify: Callable[[str], None]) -> None:
        self.ws, self.notify = ws, notify

    def start_fresh_logs(self) -> None:
        """Empty metrics, grads and samples logs for a fresh run (after the previous one moved aside)."""
        self.ws.metrics.parent.mkdir(parents=True, exist_ok=True)
        for path in (self.ws.metrics, self.ws.grads, self.ws.samples):
            if path.is_fifo():
                # a pipe left where the run's own log goes is no output a user chose (that is
                # --json's): the run's log replaces it, never waits for a reader to write into it
                path.unlink()
            atomic_write_text("", path)

    def archive_previous_run(self) -> Path | None:
        """A fresh run never overwrites an earlier one: its checkpoints and logs move to
        `<workspace>/previous/<time>/` first (use --resume to continue it instead)."""
        ws = self.ws
        return archive_run(ws, ws.run_files())

    def remove_orphan_temp_files(self) -> None:
        """Temp files of an atomic save whose writer was killed (SIGKILL skips the cleanup);
        safe to remove only because this process holds the workspace lock."""
        for folder in (self.ws.checkpoints, self.ws.metrics.parent):
            if not folder.is_dir():
                continue
            for tmp in sorted(folder.glob(".*.tmp")):
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()
                    self.notify(f"removed {tmp}, left by an interrupted save")

    def write_sample(self, model: torch.nn.Module, tokenizer: CharTokenizer, step: int, val_loss: float | None) -> None:
        """A short sample at the fixed prompt and seed (`minigpt.logs.samples`), after the
        checkpoint: a failure to write it is a notice, never the end of the run."""
        try:
            prompt, text = draw_sample(model, tokenizer)
            with open_log(self.ws.samples, what="the samples log") as fh:
                fh.write(record_line(SampleRecord(step, text, prompt, val_loss)))
        except (OSError, MiniGPTError) as exc:
            self.notify(f"no sample written at step {step}: {exc}")

    def log_grads(self, step: int, norm_before_clip: float, clip: float, rows: list[dict]) -> None:
        record = {"step": step, "global_norm": norm_before_clip, "clip": clip, "rows": rows}
        with open_log(self.ws.grads) as fh:
            fh.write(json_line(record) + "\n")

    def truncate_logs(self, step: int) -> None:
        """Drop lines the interrupted run logged after the checkpoint we resume from. Lines that
        cannot be read (bad UTF-8, not JSON, a `step` that is not a number) are kept aside in
        `<log>.rejected`, never deleted. Streamed (`minigpt.logs.trim`): bounded memory at any size."""
        for path in (self.ws.metrics, self.ws.grads, self.ws.samples):
            if not os.path.lexists(path):
                continue
            moved, aside = trim_log(path, step)
            if moved:
                self.notify(f"moved {moved} unreadable line(s) of {path} to {aside}")
            _unshare(path)


def _unshare(path: Path) -> None:
    """A log that is also another name of the same file becomes a file of its own before the run
    appends to it: an archive of a run killed after `previous/<time>/` appeared, before the old
    names were removed, holds them as hard links, and appending would change the archive too."""
    if not path.is_symlink() and path.is_file() and path.stat().st_nlink > 1:
        with path.open("rb") as src, atomic_open(path, "wb") as copy:
            shutil.copyfileobj(src, copy)
