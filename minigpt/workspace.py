"""The on-disk layout of a run, as users of the char-level MiniGPT recipe have it."""

from __future__ import annotations

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

    def required_files(self) -> dict[str, Path]:
        files = {"tokenizer": self.tokenizer}
        files.update({f"{s}_ids": self.ids(s) for s in SPLITS})
        return files
