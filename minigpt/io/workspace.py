"""The on-disk layout of a run, as users of the char-level MiniGPT recipe have it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Workspace:
    root: Path

    def __init__(self, root: str | Path = "."):
        object.__setattr__(self, "root", Path(root).expanduser())

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer" / "char_tokenizer.json"

    def ids(self, split: str) -> Path:
        return self.root / "data" / "encoded" / f"{split}_ids.pt"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def best_checkpoint(self) -> Path:
        return self.checkpoints / "mini_gpt_best.pt"

    @property
    def latest_checkpoint(self) -> Path:
        return self.checkpoints / "mini_gpt_latest.pt"

    @property
    def metrics(self) -> Path:
        return self.root / "logs" / "metrics.jsonl"

    @property
    def grads(self) -> Path:
        return self.root / "logs" / "grads.jsonl"

    @property
    def samples(self) -> Path:
        """A short sample at a fixed prompt and seed per evaluation (see `minigpt.logs.samples`)."""
        return self.root / "logs" / "samples.jsonl"

    @property
    def loop_log(self) -> Path:
        """What `minigpt.watch` saw of a training loop (see `minigpt.loopwatch`)."""
        return self.root / "logs" / "loop.jsonl"

    @property
    def ranks(self) -> Path:
        """One file per DDP rank above 0 of a watched run: the batches each rank saw."""
        return self.root / "logs" / "ranks"

    def log_files(self) -> tuple[Path, ...]:
        """The logs a run writes (a fresh run moves the earlier run's aside first)."""
        return (self.metrics, self.grads, self.loop_log, self.samples)

    def run_files(self) -> tuple[Path, ...]:
        """Everything a fresh training run moves to previous/<time>/: its checkpoints and logs."""
        return (self.best_checkpoint, self.latest_checkpoint, *self.log_files())

    def required_files(self) -> dict[str, Path]:
        files = {"tokenizer": self.tokenizer}
        files.update({f"{s}_ids": self.ids(s) for s in SPLITS})
        return files


def archive_run(ws: Workspace, paths: Iterable[Path]) -> Path | None:
    """A fresh run never overwrites an earlier one: the non-empty files among `paths` move to
    `<workspace>/previous/<time>/` (same relative paths) first. Returns that folder, or None when
    there was nothing to move."""
    old = [p for p in paths if p.is_file() and p.stat().st_size > 0]
    if not old:
        return None
    dest = ws.root / "previous" / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while dest.exists():
        dest, n = dest.with_name(f"{dest.name.split('.')[0]}.{n}"), n + 1
    for path in old:
        target = dest / path.relative_to(ws.root)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    return dest
