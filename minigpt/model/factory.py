"""Building the model a config describes, sized before a byte is allocated.

A config (a checkpoint's, `--config`, nanoGPT's `model_args`) builds MiniGPT unless it names
another built-in class under `model_class` (`minigpt.model.nanogpt.GPT` for an imported nanoGPT
run). Only the classes in `builtin_model_classes()` can be named, so a file never chooses what
code is imported. Checkpoints written before the modules moved into folders name the classes by
their former paths (`FORMER_CLASS_NAMES`); they build as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import torch.nn as nn

from minigpt.errors import CheckpointError, ConfigError
from minigpt.io.files import describe_size
from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.model.memory import FLOAT_BYTES, minigpt_numel, require_fits
from minigpt.model.nanogpt import GPT, MODEL_CLASS, GPTConfig

ModelFactory = Callable[[dict], nn.Module]
MODEL_CLASS_KEY = "model_class"  # config entry naming a built-in model class other than MiniGPT
MINIGPT_CLASS = "minigpt.model.gpt.MiniGPT"
# the names checkpoints of minigpt 0.1.0 wrote, before the modules moved into folders
FORMER_CLASS_NAMES = {"minigpt.model.MiniGPT": MINIGPT_CLASS, "minigpt.nanogpt.GPT": MODEL_CLASS}


def builtin_model_classes() -> dict[str, tuple[type[nn.Module], Any]]:
    """Name -> (model class, config class with `from_dict`) of the classes a config may name."""
    return {MINIGPT_CLASS: (MiniGPT, MiniGPTConfig), MODEL_CLASS: (GPT, GPTConfig)}


def model_class_name(config: object) -> object:
    """The class a checkpoint's config names (MiniGPT when it names none), former names read as today's."""
    name = config.get(MODEL_CLASS_KEY, MINIGPT_CLASS) if isinstance(config, dict) else MINIGPT_CLASS
    return FORMER_CLASS_NAMES.get(name, name) if isinstance(name, str) else name


def builtin_class_of(config: object) -> str | None:
    """The built-in class whose checkpoint `config` is: the one it names under `model_class` (an
    imported nanoGPT run), MiniGPT when every key is a MiniGPTConfig field; None for any other."""
    if not isinstance(config, dict) or not config:
        return None
    name = model_class_name(config)
    if MODEL_CLASS_KEY in config:
        return name if isinstance(name, str) and name in builtin_model_classes() else None
    return MINIGPT_CLASS if set(config) <= {f.name for f in fields(MiniGPTConfig)} else None


def _split_class(config: dict) -> tuple[str, type[nn.Module], Any, dict]:
    """The config's model class (name, class, config class) and the config without the entry."""
    name = model_class_name(config)
    config = dict(config)
    config.pop(MODEL_CLASS_KEY, None)
    classes = builtin_model_classes()
    if not isinstance(name, str) or name not in classes:
        raise ConfigError(
            f"{MODEL_CLASS_KEY} {str(name)[:100]!r} is not a model class of minigpt (known: {', '.join(classes)})",
            causes=["the checkpoint was written by another tool or edited", "pass your model with --model"],
        )
    model_cls, config_cls = classes[name]
    return name, model_cls, config_cls, config


def default_model_factory(config: dict) -> nn.Module:
    """MiniGPT, or the built-in class the config names under `model_class`, sized before it is
    built (`require_buildable`): a config someone else wrote never allocates past the machine."""
    require_buildable(config, "the model config")
    _, model_cls, config_cls, config = _split_class(config)
    return model_cls(config_cls.from_dict(config))


BIG_BYTES = 256 * 2**20  # below this, building a model to compare it with its file costs nothing


def require_buildable(config: dict, what: object, *, stored: int | None = None, device: str = "cpu") -> int:
    """The one sizing rule for every model built from a config someone else wrote (a checkpoint's,
    `--config`, nanoGPT's `model_args`): the config's parameter count against `stored` (the values
    its file holds, when there is a file) and the peak estimate against the device's memory, both
    before a byte is allocated. Raises CheckpointError / ConfigError / ResourceError (the figure,
    and --allow-large); returns the parameter count."""
    cfg = sizing_config(config)
    expected = minigpt_numel(cfg)
    if stored is not None and expected * FLOAT_BYTES > BIG_BYTES and expected > 2 * stored:
        raise CheckpointError(
            f"Checkpoint {what} does not fit its config: the config describes {expected:,} parameters "
            f"({describe_size(expected * FLOAT_BYTES)}) but the file holds {stored:,} values; refused before building",
            path=what,
            causes=["the config saved with the weights was edited or belongs to another model"],
        )
    require_fits(cfg, device, batch_size=1, training=False, what=what)
    return expected


def sizing_config(config: dict) -> MiniGPTConfig:
    """The MiniGPT shape the memory estimate uses for the config's model class."""
    name, _, config_cls, config = _split_class(config)
    cfg = config_cls.from_dict(config)
    return cfg if name == MINIGPT_CLASS else cfg.sizing()
