"""Everything the checks share, built once: paths, device, tokenizer, data, model factory, checkpoint.

Loading is lazy and cached, including failures: the check that owns a file reports its error,
and the checks that need it skip.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn

from ..checkpoint import LoadedCheckpoint, load_checkpoint, read_checkpoint
from ..data import get_batch, load_ids
from ..device import resolve_device
from ..errors import ConfigError, MiniGPTError
from ..sampling import SamplerSettings
from ..tokenizer import CharTokenizer
from ..train import MODEL_FIELDS, PRESETS
from ..usermodel import model_factory_for
from ..workspace import Workspace
from . import faults

DEBUG_SHAPE = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
# the debug shape under the names common model configs use (recipe, nanoGPT, GPT-2/HF)
_DEBUG_ALIASES = [
    (("block_size", "n_positions", "n_ctx"), DEBUG_SHAPE["block_size"]),
    (("embedding_dim", "n_embd", "d_model", "hidden_size"), DEBUG_SHAPE["embedding_dim"]),
    (("num_heads", "n_head", "n_heads"), DEBUG_SHAPE["num_heads"]),
    (("num_layers", "n_layer", "n_layers"), DEBUG_SHAPE["num_layers"]),
    (("dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop"), 0.0),
]


@dataclass
class CheckOptions:
    workspace: Path = Path(".")
    checkpoint: Path | None = None  # default: <workspace>/checkpoints/mini_gpt_best.pt (absent = fresh model)
    tokenizer: Path | None = None  # default: <workspace>/tokenizer/char_tokenizer.json
    train_data: Path | None = None  # default: <workspace>/data/encoded/train_ids.pt
    model_spec: str | None = None  # FILE.py:CLASS[:CONFIG]
    config_path: Path | None = None  # JSON model config when there is no checkpoint
    device: str = "auto"
    expect_gpu: bool = False
    overfit_steps: int = 300
    skip_overfit: bool = False
    fault: str | None = None
    sampler: SamplerSettings = field(default_factory=lambda: SamplerSettings(max_new_tokens=200, seed=0))
    prompt: str = "The "
    seed: int = 0
    learning_rate: float = 1e-3  # for the optimizer-update check

    def __post_init__(self) -> None:
        self.workspace = Path(self.workspace)
        ws = Workspace(self.workspace)
        self.fresh_only = isinstance(self.checkpoint, str) and self.checkpoint.lower() == "none"  # a fresh model
        self.checkpoint = Path(self.checkpoint) if self.checkpoint and not self.fresh_only else ws.best_checkpoint
        self.tokenizer = Path(self.tokenizer) if self.tokenizer else ws.tokenizer
        self.train_data = Path(self.train_data) if self.train_data else ws.ids("train")
        if self.fault is not None and self.fault not in faults.FAULTS:
            raise ConfigError(f"unknown fault {self.fault!r}; choose from {', '.join(faults.FAULTS)}")
        if self.overfit_steps < 1:
            raise ConfigError(f"--overfit-steps must be at least 1; found {self.overfit_steps}")


class _Lazy:
    """Compute once, remember the value or the exception."""

    def __init__(self, fn: Callable):
        self.fn, self.done, self.value, self.error = fn, False, None, None
        self.lock = threading.Lock()

    def get(self):
        with self.lock:
            if not self.done:
                try:
                    self.value = self.fn()
                except Exception as exc:  # re-raised to every caller
                    self.error = exc
                self.done = True
        if self.error is not None:
            raise self.error
        return self.value


class CheckContext:
    def __init__(self, options: CheckOptions):
        self.options = options
        self.ws = Workspace(options.workspace)
        self.fault = options.fault
        self.fault_notes: list[str] = []
        self.shared: dict = {}
        self.raise_if_cancelled: Callable[[], None] = lambda: None  # set by the engine per check
        self.report_progress: Callable[[float], None] = lambda fraction: (
            None
        )  # measurements later checks (and the UI) reuse, e.g. "grad_table"
        self._device = _Lazy(lambda: resolve_device(options.device))
        self._tokenizer = _Lazy(lambda: CharTokenizer.from_file(options.tokenizer))
        self._factory = _Lazy(lambda: model_factory_for(options.model_spec))
        self._splits = _Lazy(self._load_splits)
        self._ckpt_raw = _Lazy(lambda: read_checkpoint(options.checkpoint))
        self._ckpt = _Lazy(self._load_checkpoint)

    # -- inputs -----------------------------------------------------------------------------
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
        splits = {"train": load_ids(self.options.train_data)}
        for name in ("val", "test"):
            if self.ws.ids(name).is_file():
                splits[name] = load_ids(self.ws.ids(name))
        if self.fault == "out_of_range_token":
            bad = splits["train"].clone().long()
            pos = bad.numel() // 2
            bad[pos] = self.tokenizer.vocab_size
            splits["train"] = bad
            self.fault_notes.append(f"train ID at position {pos} set to vocab_size={self.tokenizer.vocab_size}")
        return splits

    @property
    def has_checkpoint(self) -> bool:
        return not self.options.fresh_only and self.options.checkpoint.exists()

    @property
    def checkpoint_raw(self) -> dict:
        return self._ckpt_raw.get()

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        return self._ckpt.get()

    def _load_checkpoint(self) -> LoadedCheckpoint:
        factory = self.model_factory
        if self.fault == "wrong_architecture":
            base = factory

            def factory(cfg: dict):
                wider = dict(cfg)
                key = (
                    "embedding_dim" if "embedding_dim" in cfg else next(k for k, v in cfg.items() if isinstance(v, int))
                )
                wider[key] = cfg[key] * 2
                return base(wider)

        loaded = load_checkpoint(
            self.options.checkpoint,
            self.device,
            tokenizer=self.tokenizer,
            model_factory=factory,
            data=self.checkpoint_raw,
        )  # read once, shared with tokenizer_fingerprint
        loaded.model, note = faults.apply_to_model(self.fault, loaded.model, fresh=False)
        if note:
            self.fault_notes.append(note)
        return loaded

    # -- models -----------------------------------------------------------------------------
    def base_config(self) -> dict:
        """The model config fresh-model checks use: --config JSON (explicit wins), else the
        checkpoint's, else the debug preset restricted to the fields the model's config accepts."""
        if self.options.config_path:
            return self._config_file()
        if self.has_checkpoint:
            try:
                config = dict(self.checkpoint_raw["config"])
            except MiniGPTError:
                config = None  # checkpoint_load reports it; fresh-model checks fall back to the preset
            spec = self.model_spec
            fields = spec.config_fields if spec is not None else None
            # a config the model's config class cannot take is checkpoint_load's finding; the
            # fresh-model checks still examine the class itself
            if config is not None and (fields is None or set(config) <= set(fields)):
                return config
        return self._preset_for_config_class()

    def _config_file(self) -> dict:
        path = Path(self.options.config_path)
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
        config = {"vocab_size": vocab} if "vocab_size" in fields else {}
        for names, value in _DEBUG_ALIASES:
            config.update({name: value for name in names if name in fields})
        return config

    def build_model(self, config: dict | None = None, *, seed: int | None = None) -> nn.Module:
        """A freshly initialised model on the check device, with the injected fault (if any) applied."""
        torch.manual_seed(self.options.seed if seed is None else seed)
        model = self.model_factory(dict(config or self.base_config())).to(self.device)
        model, note = faults.apply_to_model(self.fault, model, fresh=True)
        if note and note not in self.fault_notes:
            self.fault_notes.append(note)
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
        except Exception:
            return {**base, "dropout": 0.0} if "dropout" in base else base

    # -- batches ----------------------------------------------------------------------------
    def batch(self, batch_size: int, block_size: int, split: str = "train", seed: int | None = None):
        gen = torch.Generator().manual_seed(self.options.seed if seed is None else seed)
        x, y = get_batch(self.splits[split], batch_size, block_size, self.device, gen)
        if self.fault == "no_shift":
            y = x.clone()  # the bug: targets are the inputs themselves
        return x, y

    @property
    def learning_rate(self) -> float:
        return 0.1 if self.fault == "lr_too_high" else self.options.learning_rate
