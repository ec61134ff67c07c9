"""What `t` trains: the workspace's own settings, read from its checkpoint's `train_config`, as
`minigpt train` flags (a `small` workspace was retrained with `--preset debug` and archived).

`train_args(train_config)` is pure: the preset whose model shape matches, then a flag for every
setting that differs from that preset. `read_train_config(workspace)` reads the checkpoint (torch:
call it from a worker thread)."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from minigpt.io.workspace import Workspace
from minigpt.train.presets import PRESETS

SHAPE_KEYS = ("block_size", "embedding_dim", "num_heads", "num_layers", "expansion_factor")
# train_config key -> the `minigpt train` flag that sets it
FLAGS = {
    "max_steps": "--steps",
    "learning_rate": "--lr",
    "batch_size": "--batch-size",
    "grad_accum": "--grad-accum",
    "eval_interval": "--eval-interval",
    "warmup_steps": "--warmup-steps",
    "grad_clip": "--grad-clip",
    "dropout": "--dropout",
    "seed": "--seed",
    "dtype": "--dtype",
}
DEFAULT_PRESET = "debug"


@dataclass(frozen=True)
class TrainPlan:
    """The flags `t` passes after `minigpt train --workspace W`, and where they came from."""

    args: list[str]
    origin: str  # in words, for the question the pane asks first
    archived: list[str]  # workspace-relative files a fresh run moves to previous/<time>/


def train_args(train_config: dict | None, defaults: dict[str, dict]) -> tuple[list[str], str]:
    """(flags, origin) reproducing `train_config`; `defaults` maps each preset to its full
    TrainConfig values (TrainConfig.from_preset(name) as a dict)."""
    if not train_config:
        return ["--preset", DEFAULT_PRESET], f"no training settings in the checkpoint: preset {DEFAULT_PRESET}"
    shape = {k: train_config.get(k) for k in SHAPE_KEYS}
    preset = next((name for name in PRESETS if all(defaults[name][k] == v for k, v in shape.items())), None)
    if preset is None:
        described = ", ".join(f"{k} {v}" for k, v in shape.items())
        return (
            ["--preset", DEFAULT_PRESET],
            f"the checkpoint's model ({described}) matches no preset: preset {DEFAULT_PRESET} (another shape)",
        )
    args = ["--preset", preset]
    for key, flag in FLAGS.items():
        value = train_config.get(key)
        if value is not None and value != defaults[preset].get(key):
            args += [flag, str(value)]
    n = (len(args) - 2) // 2
    changed = f" with {n} setting{'s' if n > 1 else ''} changed" if n else ""
    return args, f"the checkpoint's own settings: preset {preset}{changed}"


def archived_files(root: str | os.PathLike) -> list[str]:
    """What a fresh run moves aside (as `RunFiles.archive_previous_run` does: the non-empty
    checkpoints and logs it writes), workspace-relative."""
    ws = Workspace(Path(root))
    found = [p for p in ws.run_files() if p.is_file() and p.stat().st_size > 0]
    return [str(p.relative_to(ws.root)) for p in found]


def plan_training(root: str | os.PathLike, checkpoint: Path | None) -> TrainPlan:
    """Read the checkpoint's train_config (torch) and turn it into flags. Unreadable: the default."""
    from dataclasses import asdict

    from minigpt.errors import MiniGPTError
    from minigpt.model.checkpoint import read_checkpoint
    from minigpt.train.config import TrainConfig

    config, unreadable = None, ""
    if checkpoint is not None:
        try:
            config = read_checkpoint(checkpoint).get("train_config")
        # torch's weights-only unpickler lets some garbage through as these (seen: IndexError)
        except (MiniGPTError, pickle.UnpicklingError, EOFError, IndexError, ValueError, RuntimeError) as exc:
            unreadable = f"{checkpoint.name} is unreadable ({type(exc).__name__}); "
    defaults = {name: asdict(TrainConfig.from_preset(name)) for name in PRESETS}
    args, origin = train_args(config if isinstance(config, dict) else None, defaults)
    return TrainPlan(args, unreadable + origin, archived_files(root))
