"""Everything the checks share, built once per set of files: device, tokenizer, data, model
factory, checkpoint.

Loading is lazy and cached, including failures: the check that owns a file reports its error,
and the checks that need it skip. `refresh()` (the engine calls it before every run) re-resolves
the inputs and drops whatever was read from a file that changed on disk (path, size, mtime,
inode), so one report never mixes two runs.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import torch
import torch.nn as nn

from minigpt.checks.faults import FAULTS, Fault
from minigpt.checks.hf_folder import load_hf_folder
from minigpt.checks.options import CheckOptions, ResolvedInputs
from minigpt.checks.result import CheckResult, FileIdentity, Outcome, Status
from minigpt.data.batches import get_batch, load_ids
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.data.tokenizer_load import load_tokenizer
from minigpt.device import resolve_device
from minigpt.errors import ConfigError, MiniGPTError
from minigpt.io.files import stat_input
from minigpt.io.jsonsafe import parse_json
from minigpt.io.workspace import Workspace
from minigpt.logs.curve_advice import RunSettings
from minigpt.model.checkpoint import LoadedCheckpoint, load_checkpoint, read_checkpoint
from minigpt.model.factory import MODEL_CLASS_KEY, builtin_class_of
from minigpt.model.user import ModelSpec, model_factory_for
from minigpt.train.config import MODEL_FIELDS
from minigpt.train.presets import PRESETS

__all__ = ["CheckContext", "CheckOptions", "InspectedModel"]

DEBUG_SHAPE = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
# the debug shape under the names common model configs use (recipe, nanoGPT, GPT-2/HF)
_DEBUG_ALIASES = [
    (("block_size", "n_positions", "n_ctx", "max_position_embeddings", "max_seq_len"), DEBUG_SHAPE["block_size"]),
    (("embedding_dim", "n_embd", "d_model", "hidden_size"), DEBUG_SHAPE["embedding_dim"]),
    (("num_heads", "n_head", "n_heads", "num_attention_heads", "num_key_value_heads"), DEBUG_SHAPE["num_heads"]),
    (("num_layers", "n_layer", "n_layers", "num_hidden_layers"), DEBUG_SHAPE["num_layers"]),
    (("intermediate_size", "n_inner", "ffn_dim"), DEBUG_SHAPE["embedding_dim"] * DEBUG_SHAPE["expansion_factor"]),
    (("dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "attention_dropout", "hidden_dropout"), 0.0),
]
# config entries that are no field of the model's config class (the factory drops them)
_NOT_FIELDS = frozenset({MODEL_CLASS_KEY})

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


PRESET_SOURCE = "the debug preset"  # how `config_source` names the stand-in for an unknown config


class CheckContext:
    def __init__(self, options: CheckOptions):
        self.options = options
        self.fault: Fault | None = FAULTS[options.fault] if options.fault else None
        self.fault_notes: list[str] = []
        # this run's results so far, by id (the engine fills it): a verdict may name an earlier finding
        self.earlier: dict[str, CheckResult] = {}
        self._device = _Lazy(lambda: resolve_device(options.device))
        self._factory = _Lazy(lambda: model_factory_for(options.model_spec))
        self.inputs: ResolvedInputs = options.resolve()
        self._keys: dict[str, tuple | None] = {}
        self._reset_files()

    # -- files ------------------------------------------------------------------------------
    def _reset_files(self) -> None:
        inputs = self.inputs
        self.ws = Workspace(inputs.workspace)
        self._tokenizer = _Lazy(lambda: load_tokenizer(inputs.tokenizer_spec))
        self._splits = _Lazy(self._load_splits)
        self._ckpt_raw = _Lazy(lambda: read_checkpoint(inputs.checkpoint))  # type: ignore[arg-type]
        self._ckpt = _Lazy(self._load_checkpoint)
        self._keys = self._file_keys()

    def _file_keys(self) -> dict[str, tuple | None]:
        i = self.inputs
        return {
            "checkpoint": _stat_key(i.checkpoint or i.hf_weights),
            "tokenizer": _stat_key(i.tokenizer),
            "train": _stat_key(i.train_data),
            **{split: _stat_key(self.ws.ids(split)) for split in ("val", "test")},
        }

    def refresh(self) -> list[str]:
        """Before a run: re-resolve the inputs and forget what was read from files that changed.
        Returns the roles that changed (empty when everything is as it was)."""
        self.fault_notes = []
        self.earlier = {}
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
            ("checkpoint", self.inputs.checkpoint or self.inputs.hf_weights),
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
    def tokenizer(self) -> Tokenizer:
        return self._tokenizer.get()

    @property
    def model_factory(self) -> Callable[[dict], nn.Module]:
        return self._factory.get()[0]

    @property
    def model_spec(self) -> ModelSpec | None:
        return self._factory.get()[1]

    def _hf_spec(self) -> ModelSpec:
        """The `--model hf:PATH` spec, whenever `hf_weights` is set (it is set only for one)."""
        spec = self.model_spec
        assert spec is not None, "hf_weights is set only for --model hf:PATH"
        return spec

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
        if self.inputs.checkpoint is None:
            return self.hf_weights is not None
        return self.inputs.checkpoint.exists()

    @property
    def hf_weights(self) -> Path | None:
        """`--model hf:PATH` with no --checkpoint: the folder's saved weights are the run's model."""
        return self.inputs.hf_weights

    @property
    def checkpoint_raw(self) -> dict:
        if self.hf_weights is not None:
            return {"config": self._hf_spec().folder_config(), "imported_from": {"format": "Hugging Face"}}
        return self._ckpt_raw.get()

    @property
    def checkpoint(self) -> LoadedCheckpoint:
        return self._ckpt.get()

    def _load_checkpoint(self) -> LoadedCheckpoint:
        if self.hf_weights is not None:
            return self._load_hf_folder(self.hf_weights.parent)
        spec = self.model_spec
        written = builtin_class_of(self.checkpoint_raw["config"]) if spec and spec.folder else None
        if spec is not None and written is not None:  # --checkpoint P beside --model hf:FOLDER
            raise ConfigError(
                f"--checkpoint {self.inputs.checkpoint} holds a {written}, not the {spec.model_cls.__name__} "
                f"--model {spec.spec} builds",
                path=self.inputs.checkpoint,
                causes=[
                    f"leave out --checkpoint: --model {spec.spec} judges the weights saved in {spec.folder}",
                    f"leave out --model: {self.inputs.checkpoint} is judged with its own class",
                ],
            )
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

    def _load_hf_folder(self, folder: Path) -> LoadedCheckpoint:
        model = load_hf_folder(self._hf_spec(), folder, self.device)
        if self.fault:
            model, note = self.fault.model(model, fresh=False)
            self._note(note)
        return LoadedCheckpoint(str(folder), model, self._hf_spec().folder_config() or {}, None, None, None, raw={})

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

    def judged_model(self) -> InspectedModel:
        """The model a check of the model's properties judges: a copy of the checkpoint's (finite
        weights) when there is one, so the check may change its mode and state, else a fresh one.
        A checkpoint that does not load is checkpoint_load's finding: a fresh model stands in, and
        the label says so."""
        if self.has_checkpoint:
            try:
                inspected = self.inspected_model(require_finite=True)
            except Outcome:
                return InspectedModel(self.build_model(), "fresh model", "fresh model (the checkpoint did not load)")
            if inspected.source == "checkpoint":
                return InspectedModel(copy.deepcopy(inspected.model), inspected.source, inspected.label)
        why = "--checkpoint none" if self.inputs.fresh_model_requested else "no checkpoint"
        return InspectedModel(self.build_model(), "fresh model", f"fresh model ({why})")

    def base_config(self) -> dict:
        """The model config fresh-model checks use (see `config_source` for where it came from)."""
        return self._base_config()[0]

    def config_source(self) -> tuple[str, bool]:
        """Where `base_config` came from, in words, and whether that is a fallback the user should
        know about (a checkpoint whose config was not used)."""
        _, source, fallback = self._base_config()
        return source, fallback

    def config_from_run(self) -> bool:
        """Whether `base_config` is the run's own (--config, the checkpoint's, an hf:PATH folder's),
        not the debug preset standing in for an unknown one."""
        return not self._base_config()[1].startswith(PRESET_SOURCE)

    def _base_config(self) -> tuple[dict, str, bool]:
        """--config JSON (explicit wins), else the checkpoint's (whatever extra keys it carries, such
        as the `model_class` an import writes), else an hf:PATH folder's config.json, else the debug
        preset restricted to the fields the model's config accepts."""
        if self.inputs.config_path:
            return self._config_file(self.inputs.config_path), f"--config {self.inputs.config_path}", False
        spec = self.model_spec
        why = "no checkpoint"
        if self.has_checkpoint:
            try:
                config = self.checkpoint_raw["config"]
                config = dict(config) if isinstance(config, dict) else None
                why = "the checkpoint holds no config dict" if config is None else why
            except MiniGPTError:
                config, why = None, "the checkpoint did not load"
            fields = spec.config_fields if spec is not None else None
            # a config the model's config class cannot take is checkpoint_load's finding; the
            # fresh-model checks still examine the class itself
            extra = sorted(set(config or {}) - set(fields or ()) - _NOT_FIELDS) if fields is not None else []
            if config is not None and not extra:
                return config, "the checkpoint's config", False
            if config is not None and spec is not None:
                cls = spec.config_cls.__name__
                why = f"the checkpoint's config has {', '.join(extra[:4])}, which {cls} does not take"
        if spec is not None and (folder := spec.folder_config()) is not None:
            return folder, f"{spec.folder}/config.json", self.has_checkpoint
        return self._preset_for_config_class(), f"{PRESET_SOURCE} ({why})", self.has_checkpoint

    @staticmethod
    def _config_file(path: Path) -> dict:
        st = stat_input(path, "--config model config", error=ConfigError)  # a FIFO would block the read
        if st.st_size > 1 << 24:
            raise ConfigError(f"--config {path}: {st.st_size:,} bytes is no model config (a few hundred bytes)")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--config {path}: cannot read a JSON model config ({exc})", path=path) from None
        data = parse_json(text, path=path, error=ConfigError, what="a model config", lead="--config ")  # any depth
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

    def run_settings(self) -> RunSettings | None:
        """The training settings the checkpoint carries (minigpt's `train_config`, or an imported
        nanoGPT run's whole `config`), for the curve's advice; None without a readable checkpoint."""
        if not self.has_checkpoint or self.hf_weights is not None:
            return None
        try:
            raw = self.checkpoint_raw
        except MiniGPTError:
            return None
        return RunSettings.from_checkpoint(raw)

    # -- batches ----------------------------------------------------------------------------
    def batch(
        self, batch_size: int, block_size: int, split: str = "train", seed: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.options.seed if seed is None else seed)
        x, y = get_batch(self.splits[split], batch_size, block_size, self.device, gen)
        return self.fault.batch(x, y) if self.fault else (x, y)


def weights_finite(model: nn.Module) -> bool:
    """Every parameter finite (one norm per tensor, one host transfer)."""
    params = [p.detach() for p in model.parameters()]
    if not params:
        return True
    norms = torch.stack([torch.linalg.vector_norm(p.float()) for p in params])
    return bool(torch.isfinite(norms).all())
