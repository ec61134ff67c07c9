"""What the user asked the checks to look at (`CheckOptions`), and what that resolves to on disk
(`ResolvedInputs`). Two immutable values: copying the options with `dataclasses.replace` (the UI
does, to inject a fault) never re-resolves a resolved path. No torch here."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from minigpt.checks.faults import FAULTS
from minigpt.data.tokenizer_load import HF_PREFIX, is_named_encoding, tokenizer_file_in, workspace_tokenizer
from minigpt.errors import ConfigError
from minigpt.io.workspace import Workspace
from minigpt.sample.settings import SamplerSettings
from minigpt.train.option_ranges import require

FRESH_MODEL = "none"  # --checkpoint none: inspect a freshly initialised model, ignore any checkpoint
HF_WEIGHTS = "model.safetensors"  # what save_pretrained writes (safetensors is its default)


@dataclass(frozen=True)
class CheckOptions:
    """Exactly what the user said; None means "the workspace's default"."""

    workspace: Path | str = "."
    checkpoint: Path | str | None = None  # None: hf:FOLDER's weights, else the workspace's best; "none": fresh
    tokenizer: Path | str | None = None  # a file, a folder or tiktoken:NAME; None: the workspace's, else hf:PATH's
    train_data: Path | str | None = None  # None: <workspace>/data/encoded/train_ids.pt
    model_spec: str | None = None  # FILE.py:CLASS[:CONFIG]
    config_path: Path | str | None = None  # JSON model config when there is no checkpoint
    metrics: Path | str | None = None  # None: <workspace>/logs/metrics.jsonl; or a TensorBoard event file/folder
    device: str = "auto"
    expect_gpu: bool = False
    overfit_steps: int = 300
    skip_overfit: bool = False
    fault: str | None = None
    sampler: SamplerSettings = field(default_factory=lambda: SamplerSettings(max_new_tokens=200, seed=0))
    prompt: str = "The "
    seed: int = 0
    learning_rate: float = 1e-3  # optimizer_update's own rate, where the run's is not known
    lr_probe: bool = False  # --lr-probe: the opt-in learning-rate probe (short training runs at rates around the run's)
    lr_probe_steps: int = 150  # steps of each probe run
    run_learning_rate: float | None = None  # --lr: the run's learning rate (else its checkpoint's or log's)
    allow_large: bool = False  # --allow-large: build models past the memory estimate (memory.large_allowed)

    def resolve(self) -> ResolvedInputs:
        """The paths the checks read. A path the user named explicitly must exist: a typo is bad
        usage (ConfigError, exit 2), never a silent fall-back to a fresh model or a default file."""
        if self.fault is not None and self.fault not in FAULTS:
            raise ConfigError(f"unknown fault {self.fault!r}; choose from {', '.join(FAULTS)}")
        require("--overfit-steps", self.overfit_steps)
        require("--lr-probe-steps", self.lr_probe_steps)
        require("--lr", self.run_learning_rate)
        ws = Workspace(self.workspace)
        fresh = isinstance(self.checkpoint, str) and self.checkpoint.strip().lower() == FRESH_MODEL
        explicit = {
            "--checkpoint": None if fresh else self.checkpoint,
            "--tokenizer": None if is_named_encoding(self.tokenizer) else self.tokenizer,
            "--train-data": self.train_data,
            "--config": self.config_path,
            "--metrics": self.metrics,
        }
        for flag, named in explicit.items():
            if named is not None and not Path(named).expanduser().exists():
                raise ConfigError(
                    f"{flag} {named}: no such file",
                    path=named,
                    causes=["a typo in the path", "the file was moved (a fresh training run archives to previous/)"],
                )
        # `--model hf:FOLDER` brings its own weights: the workspace's checkpoint (a MiniGPT or an
        # imported nanoGPT run) is never judged in their place unless --checkpoint names it
        folder = self._hf_folder() if not fresh and self.checkpoint is None else None
        folder_weights = folder / HF_WEIGHTS if folder is not None else None
        if fresh or folder_weights is not None:
            checkpoint = None  # a fresh model, or the folder's weights (`hf_weights`)
        elif self.checkpoint is not None:
            checkpoint = Path(self.checkpoint).expanduser()
        else:
            checkpoint = ws.best_checkpoint if ws.best_checkpoint.exists() else None
        tokenizer_spec = self._tokenizer_spec(ws)
        return ResolvedInputs(
            workspace=ws.root,
            checkpoint=checkpoint,
            checkpoint_default=folder_weights or ws.best_checkpoint,
            hf_weights=folder_weights if folder_weights is not None and folder_weights.is_file() else None,
            set_aside=ws.best_checkpoint if folder_weights is not None and ws.best_checkpoint.exists() else None,
            fresh_model_requested=fresh,
            tokenizer=None if is_named_encoding(tokenizer_spec) else Path(tokenizer_spec).expanduser(),
            tokenizer_spec=tokenizer_spec,
            train_data=Path(self.train_data).expanduser() if self.train_data else ws.ids("train"),
            config_path=Path(self.config_path).expanduser() if self.config_path else None,
            metrics=Path(self.metrics).expanduser() if self.metrics else ws.metrics,
        )

    def _hf_folder(self) -> Path | None:
        """The folder of an `--model hf:FOLDER` spec; None for any other model."""
        spec = self.model_spec or ""
        return Path(spec[len(HF_PREFIX) :]).expanduser() if spec.startswith(HF_PREFIX) else None

    def _tokenizer_spec(self, ws: Workspace) -> str:
        """--tokenizer as given; else the workspace's tokenizer; else the one saved beside an
        `--model hf:PATH` folder's weights; else the workspace's default path (its messages name it)."""
        if self.tokenizer is not None:
            return str(self.tokenizer)
        own = workspace_tokenizer(ws.tokenizer)
        folder = self._hf_folder()
        if not own.exists() and folder is not None:
            beside = tokenizer_file_in(folder)
            if beside is not None:
                return str(beside)
        return str(own)


@dataclass(frozen=True)
class ResolvedInputs:
    workspace: Path
    checkpoint: Path | None  # None: the checks run on a fresh model
    checkpoint_default: Path  # where the checkpoint would be (for messages): the workspace's, or hf:FOLDER's weights
    hf_weights: Path | None  # --model hf:FOLDER, no --checkpoint: the folder's model.safetensors, the judged weights
    set_aside: Path | None  # the workspace's checkpoint, not judged because hf:FOLDER brings its own weights
    fresh_model_requested: bool  # --checkpoint none
    tokenizer: Path | None  # the tokenizer's file (None: an encoding named by tiktoken:NAME)
    tokenizer_spec: str  # what the tokenizer is loaded from: the file's path or tiktoken:NAME
    train_data: Path
    config_path: Path | None
    metrics: Path  # a metrics.jsonl, or a TensorBoard event file or folder
