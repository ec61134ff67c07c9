"""Everything the checks share, built once per set of files: device, tokenizer, data, model
factory, checkpoint.

Loading is lazy and cached, including failures: the check that owns a file reports its error,
and the checks that need it skip. `refresh()` (the engine calls it before every run) re-resolves
the inputs and drops whatever was read from a file that changed on disk (path, size, mtime,
inode), so one report never mixes two runs.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import torch
import torch.nn as nn

from ..checkpoint import LoadedCheckpoint, load_checkpoint, read_checkpoint
from ..data import get_batch, load_ids
from ..device import resolve_device
from ..errors import ConfigError, MiniGPTError
from ..tokenizer import CharTokenizer
from ..train import MODEL_FIELDS, PRESETS
from ..usermodel import model_factory_for
from ..workspace import Workspace
from .faults import FAULTS, Fault
from .options import CheckOptions, ResolvedInputs
from .result import FileIdentity, Outcome, Status

__all__ = ["CheckContext", "CheckOptions", "InspectedModel"]

DEBUG_SHAPE = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
# the debug shape under the names common model configs use (recipe, nanoGPT, GPT-2/HF)
_DEBUG_ALIASES = [
    (("block_size", "n_positions", "n_ctx", "max_position_embeddings", "max_seq_len"), DEBUG_SHAPE["block_size"]),
    (("embedding_dim", "n_embd", "d_model", "hidden_size"), DEBUG_SHAPE["embedding_dim"]),
    (("num_heads", "n_head", "n_heads"), DEBUG_SHAPE["num_heads"]),
    (("num_layers", "n_layer", "n_layers"), DEBUG_SHAPE["num_layers"]),
    (("dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop"), 0.0),
]

T = TypeVar("T")


class _Lazy(Generic[T]):
    """Compute once, remember the value or the exception."""

    def __init__(self, fn: Callable[[], T]):
        self.fn, self.done = fn, False
        self.value: T | None = None
        self.error: Exception | None = None
        self.lock = threading.Lock()

    def get(self) -> T:
        with self.lock:
            if not self.done:
                try:
                    self.value = self.fn()
                except Exception as exc:  # re-raised to every caller
                    self.error = exc
                self.done = True
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def _stat_key(path: Path | None) -> tuple | None:
    """What identifies a file's content cheaply: a change in any of these means read it again."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return (str(path), None)
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino)


@dataclass(frozen=True)
class InspectedModel:
    """The model a check looks at, and where it came from (said in every summary that uses it)."""

    model: nn.Module
    source: str  # "checkpoint" or "fresh model"
    label: str  # e.g. "checkpoint step 200" or "fresh model (no checkpoint)"


class CheckContext:
    def __init__(self, options: CheckOptions):
        self.options = options
        self.fault: Fault | None = FAULTS[options.fault] if options.fault else None
        self.fault_notes: list[str] = []
        self._device = _Lazy(lambda: resolve_device(options.device))
        self._factory = _Lazy(lambda: model_factory_for(options.model_spec))
        self.inputs: ResolvedInputs = options.resolve()
        self._keys: dict[str, tuple | None] = {}
        self._reset_files()

    # -- files ------------------------------------------------------------------------------
    def _reset_files(self) -> None:
        inputs = self.inputs
        self.ws = Workspace(inputs.workspace)
        self._tokenizer = _Lazy(lambda: CharTokenizer.from_file(inputs.tokenizer))
        self._splits = _Lazy(self._load_splits)
        self._ckpt_raw = _Lazy(lambda: read_checkpoint(inputs.checkpoint))  # type: ignore[arg-type]
        self._ckpt = _Lazy(self._load_checkpoint)
        self._keys = self._file_keys()

    def _file_keys(self) -> dict[str, tuple | None]:
        i = self.inputs
        return {
            "checkpoint": _stat_key(i.checkpoint),
            "tokenizer": _stat_key(i.tokenizer),
            "train": _stat_key(i.train_data),
            **{split: _stat_key(self.ws.ids(split)) for split in ("val", "test")},
        }

    def refresh(self) -> list[str]:
        """Before a run: re-resolve the inputs and forget what was read from files that changed.
        Returns the roles that changed (empty when everything is as it was)."""
        self.fault_notes = []
        self.inputs = self.options.resolve()
        keys = self._file_keys()
        changed = [role for role, key in keys.items() if self._keys.get(role) != key]
        if changed:
            self._reset_files()
        return changed

    def judged_files(self) -> list[FileIdentity]:
        """The files this context's verdicts are about, with their size, mtime and (checkpoint) step."""
        out = []
        roles = [
            ("checkpoint", self.inputs.checkpoint),
            ("metrics", self.inputs.metrics),
            ("tokenizer", self.inputs.tokenizer),
            ("train_ids", self.inputs.train_data),
        ]
        for role, path in roles:
            if path is None or not path.exists():
                continue
            st = path.stat()
            step = None
            if role == "checkpoint" and self._ckpt_raw.done and self._ckpt_raw.error is None:
                raw_step = (self._ckpt_raw.value or {}).get("step")
                step = raw_step if isinstance(raw_step, int) and not isinstance(raw_step, bool) else None
            out.append(FileIdentity(role, str(path), st.st_size, st.st_mtime, step))
        return out

    # -- inputs -----------------------------------------------------------------------------
    @property
    def fault_name(self) -> str | None:
        return self.fault.name if self.fault else None

    @property
    def device(self) -> torch.device:
        return self._device.get()

    @property
    def tokenizer(self) -> CharTokenizer:
        return self._tokenizer.get()

    @property
    def model_factory(self) -> Callable[[dict], nn.Module]:
        return self._factory.get()[0]

    @property
    def model_spec(self):
        return self._factory.get()[1]

    @property
    def splits(self) -> dict[str, torch.Tensor]:
        return self._splits.get()

    def _load_splits(self) -> dict[str, torch.Tensor]:
        splits = {"train": load_ids(self.inputs.train_data)}
        for name in ("val", "test"):
            if self.ws.ids(name).is_file():
                splits[name] = load_ids(self.ws.ids(name))
        if self.fault:
            splits, note = self.fault.splits(splits, self.tokenizer.vocab_size)
            self._note(note)
        return splits

    @property
    def has_checkpoint(self) -> bool:
        return self.inputs.checkpoint is not None and self.inputs.checkpoint.exists()

    @property
    def checkpoint_raw(self) -> dict:
        return self._ckpt_raw.get()

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        return self._ckpt.get()

    def _load_checkpoint(self) -> LoadedCheckpoint:
        factory = self.fault.checkpoint_factory(self.model_factory) if self.fault else self.model_factory
        loaded = load_checkpoint(
            self.inputs.checkpoint,  # type: ignore[arg-type]
            self.device,
            tokenizer=self.tokenizer,
            model_factory=factory,
            data=self.checkpoint_raw,  # read once, shared with tokenizer_fingerprint
        )
        if self.fault:
            loaded.model, note = self.fault.model(loaded.model, fresh=False)
            self._note(note)
        return loaded

    def _note(self, note: str | None) -> None:
        if note and note not in self.fault_notes:
            self.fault_notes.append(note)

    # -- models -----------------------------------------------------------------------------
    def inspected_model(self, *, require_finite: bool = False) -> InspectedModel:
        """The checkpoint's model when there is a checkpoint, else a fresh one. A checkpoint that
        does not load (or, with `require_finite`, holds NaN/inf weights) skips the calling check:
        checkpoint_load owns that finding."""
        if not self.has_checkpoint:
            why = "--checkpoint none" if self.inputs.fresh_model_requested else "no checkpoint"
            return InspectedModel(self.build_model(), "fresh model", f"fresh model ({why})")
        try:
            loaded = self.checkpoint
        except MiniGPTError:
            raise Outcome(Status.SKIP, "skipped: the checkpoint did not load (see checkpoint_load)") from None
        if require_finite and not weights_finite(loaded.model):
            raise Outcome(Status.SKIP, "skipped: the checkpoint holds non-finite weights (see checkpoint_load)")
        step = f" step {loaded.step}" if loaded.step is not None else ""
        return InspectedModel(loaded.model, "checkpoint", f"checkpoint{step}")

    def base_config(self) -> dict:
        """The model config fresh-model checks use: --config JSON (explicit wins), else the
        checkpoint's, else the debug preset restricted to the fields the model's config accepts."""
        if self.inputs.config_path:
            return self._config_file(self.inputs.config_path)
        if self.has_checkpoint:
            try:
                config = self.checkpoint_raw["config"]
                config = dict(config) if isinstance(config, dict) else None
            except MiniGPTError:
                config = None  # checkpoint_load reports it; fresh-model checks fall back to the preset
            spec = self.model_spec
            fields = spec.config_fields if spec is not None else None
            # a config the model's config class cannot take is checkpoint_load's finding; the
            # fresh-model checks still examine the class itself
            if config is not None and (fields is None or set(config) <= set(fields)):
                return config
        return self._preset_for_config_class()

    @staticmethod
    def _config_file(path: Path) -> dict:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(f"--config {path}: cannot read a JSON model config ({exc})", path=path) from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"--config {path}: expected a JSON object of config fields, found {type(data).__name__}", path=path
            )
        return data

    def _preset_for_config_class(self) -> dict:
        """The debug preset, spelled with the field names the model's config class has."""
        vocab = self.tokenizer.vocab_size
        spec = self.model_spec
        fields = spec.config_fields if spec is not None else None
        if fields is None:
            return {"vocab_size": vocab, **DEBUG_SHAPE}
        config: dict = {"vocab_size": vocab} if "vocab_size" in fields else {}
        for names, value in _DEBUG_ALIASES:
            config.update({name: value for name in names if name in fields})
        return config

    def build_model(self, config: dict | None = None, *, seed: int | None = None) -> nn.Module:
        """A freshly initialised model on the check device, with the injected fault (if any) applied."""
        torch.manual_seed(self.options.seed if seed is None else seed)
        model = self.model_factory(dict(config or self.base_config())).to(self.device)
        if self.fault:
            model, note = self.fault.model(model, fresh=True)
            self._note(note)
        return model

    def debug_config(self) -> dict:
        """Debug-size version of the base config with dropout 0 (for the overfit check): the
        debug shape replaces the fields the config has under the recipe's names or nanoGPT's."""
        base = self.base_config()
        small = dict(base)
        for names, value in _DEBUG_ALIASES:
            for name in names:
                if name in small:
                    small[name] = value
        try:
            self.model_factory(dict(small))
            return small
        except Exception:  # the class rejects the debug shape: examine it at its own size
            return {**base, "dropout": 0.0} if "dropout" in base else base

    # -- batches ----------------------------------------------------------------------------
    def batch(self, batch_size: int, block_size: int, split: str = "train", seed: int | None = None):
        gen = torch.Generator().manual_seed(self.options.seed if seed is None else seed)
        x, y = get_batch(self.splits[split], batch_size, block_size, self.device, gen)
        return self.fault.batch(x, y) if self.fault else (x, y)

    @property
    def learning_rate(self) -> float:
        return self.fault.learning_rate(self.options.learning_rate) if self.fault else self.options.learning_rate


def weights_finite(model: nn.Module) -> bool:
    """Every parameter finite (one norm per tensor, one host transfer)."""
    params = [p.detach() for p in model.parameters()]
    if not params:
        return True
    norms = torch.stack([torch.linalg.vector_norm(p.float()) for p in params])
    return bool(torch.isfinite(norms).all())
