"""Samples by step from a watched model (`minigpt.watch(..., tokenizer=PATH)`): the trainer's
`logs/samples.jsonl` format, at step 0, every `every` optimizer steps and at `close()`. Any problem
(a bad tokenizer file, a model that cannot generate, a compiled model) turns sampling off once,
saying why, and the rest of the watch goes on."""

from __future__ import annotations

import os
from typing import Any, TextIO

import torch.nn as nn

from minigpt.loopwatch.runlog import RunLog


class WatchSamples:
    def __init__(self, log_writer: RunLog, every: int, stderr: TextIO) -> None:
        self.log_writer, self.every, self.stderr = log_writer, every, stderr
        self.tokenizer: Any = None  # a CharTokenizer once loaded: samples are written
        self.drawing = False  # True while a sample is drawn: its forwards are not the loop's
        self.last_step: int | None = None

    def start(self, path: str | os.PathLike, model: nn.Module, step: int, val_loss: float | None) -> None:
        """Load the tokenizer and write this step's sample (step 0's, the noise the run starts from)."""
        from minigpt.data.tokenizer import CharTokenizer

        try:
            self.tokenizer = CharTokenizer.from_file(path)
        except Exception as exc:  # noqa: BLE001  a bad tokenizer file must not stop the user's run
            self._off(f"{type(exc).__name__}: {exc}")
            return
        self.draw(model, step, val_loss)

    def due(self, step: int) -> bool:
        return self.tokenizer is not None and step % self.every == 0

    def at_close(self, model: nn.Module, step: int, val_loss: float | None) -> None:
        if self.tokenizer is not None and self.last_step != step:
            self.draw(model, step, val_loss)

    def draw(self, model: nn.Module, step: int, val_loss: float | None) -> None:
        from minigpt.logs.samples import SampleRecord, record_line
        from minigpt.sample.generate import draw_sample

        if isinstance(model, nn.parallel.DistributedDataParallel):
            model = model.module
        if type(model).__name__ == "OptimizedModule":
            self._off("the model is torch.compile'd, and generating would recompile it")
            return
        self.drawing = True
        try:
            prompt, text = draw_sample(model, self.tokenizer)
            self.log_writer.sample(record_line(SampleRecord(step, text, prompt, val_loss)))
            self.last_step = step
        except Exception as exc:  # noqa: BLE001  a model that cannot generate: no samples, training goes on
            self._off(f"{type(exc).__name__}: {exc}")
        finally:
            self.drawing = False

    def _off(self, why: str) -> None:
        self.tokenizer = None
        try:
            print(f"minigpt.watch: no samples ({why}); the rest of the watch goes on", file=self.stderr)
        except Exception:  # noqa: BLE001  a closed stderr
            pass
