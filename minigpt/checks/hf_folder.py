"""A Hugging Face `save_pretrained` folder's weights (`--model hf:FOLDER`), read with safetensors and
never from the hub: the file's header is checked against the file and the model sized from its
config before either library allocates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from minigpt.checks.options import HF_WEIGHTS
from minigpt.errors import CheckpointError
from minigpt.io.safetensors_file import DTYPE_BYTES, read_safetensors_header
from minigpt.model.hf_sizing import config_dtype_bytes
from minigpt.model.memory import FLOAT_BYTES
from minigpt.model.user import ModelSpec


def load_hf_folder(spec: ModelSpec, folder: Path, device: torch.device) -> nn.Module:
    """The model `spec` builds with `folder`'s weights, on `device`; CheckpointError (naming the
    file) for weights that do not load, the size refusal for a model past the device."""
    from safetensors import SafetensorError

    weights = folder / HF_WEIGHTS
    header = read_safetensors_header(weights)
    raw_config = spec.folder_config_json() or {}
    # from_pretrained loads at the config's dtype, else at the file's ("auto")
    file_bytes = DTYPE_BYTES.get(header.float_dtype() or "", FLOAT_BYTES)
    spec.require_buildable(
        spec.build_config(spec.folder_config() or {}),
        raw_config,
        folder / "config.json",
        item_bytes=config_dtype_bytes(raw_config, default=file_bytes),
        stored=header.stored_values,
        stored_at=weights,
        device=device,
    )
    try:
        hf_class: Any = spec.model_cls  # a transformers PreTrainedModel subclass (hf: specs only)
        model = hf_class.from_pretrained(str(folder), local_files_only=True, use_safetensors=True)
    except SafetensorError as exc:  # what the header check does not foresee
        raise CheckpointError(
            f"Not a readable safetensors file: {weights}: the safetensors library refused it ({str(exc)[:300]})",
            path=weights,
            causes=["an interrupted save or copy", "the file was edited, or is not a safetensors file"],
        ) from None
    except (OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"{folder}: the saved model does not load: {str(exc)[:300]}",
            path=folder,
            causes=["model.safetensors and config.json come from different models", "a truncated save"],
        ) from None
    return model.to(device)
