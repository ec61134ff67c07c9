"""Load a user's own model class: `--model FILE.py:CLASS[:CONFIG]`, `package.module:CLASS[:CONFIG]`
(`transformers:GPT2LMHeadModel:GPT2Config`) or `hf:PATH` (a `save_pretrained` folder).

The model is built as `CLASS(CONFIG(**config))`; CONFIG defaults to `CLASS + "Config"` in the
same module. Its forward is `forward(idx, targets=None) -> (logits, loss)`, `forward(idx)`, or a
Hugging Face causal LM's (see `contract.forward_plan`); a forward the checks cannot call is
refused here. The config exposes the context length and vocabulary size under a common name.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import sys
import traceback
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt.errors import ModelSpecError

if TYPE_CHECKING:
    from torch import nn


@dataclass
class ModelSpec:
    spec: str
    model_cls: type
    config_cls: type
    module_name: str
    folder: Path | None = None  # hf:PATH: the save_pretrained folder (config.json, model.safetensors)

    def folder_config(self) -> dict | None:
        """hf:PATH: the model config saved in the folder, as the dict the factory takes."""
        data = self.folder_config_json()
        if data is None:
            return None
        fields = self.config_fields
        return {k: v for k, v in data.items() if fields is None or k in fields}

    def folder_config_json(self) -> dict | None:
        """hf:PATH: the folder's config.json as it is (its `dtype` and sub-configs included)."""
        if self.folder is None:
            return None
        return read_hf_config(self.folder / "config.json")

    def factory(self, config: dict) -> nn.Module:
        # the built-in class a checkpoint names for itself (an imported nanoGPT run) is not a field
        config = {k: v for k, v in config.items() if k != "model_class"}
        cfg = self.build_config(config)
        if self.is_transformers_model:  # sized before it is built: a config.json someone else wrote
            self.require_buildable(cfg, config, f"--model {self.spec} ({self.model_cls.__name__})")
        try:
            return self.model_cls(cfg)
        except Exception as exc:
            raise ModelSpecError(
                f"{self.model_cls.__name__}(config) raised {type(exc).__name__}: {exc}",
                causes=[_last_user_frame(exc)],
            ) from None

    def build_config(self, config: dict) -> object:
        """`CONFIG(**config)`; a ModelSpecError naming the fields the class takes when it refuses."""
        try:
            return self.config_cls(**config)
        except TypeError as exc:
            fields = _config_fields(self.config_cls)
            raise ModelSpecError(
                f"{self.config_cls.__name__}(**config) rejected the config: {exc}",
                causes=[
                    f"{self.config_cls.__name__} accepts {fields}" if fields else "the config class has other fields",
                    "the checkpoint was written for another model class",
                ],
            ) from None

    @property
    def is_transformers_model(self) -> bool:
        """Whether the class is a transformers PreTrainedModel (then it is sized on the meta device)."""
        transformers = sys.modules.get("transformers")  # a transformers class means it is imported
        return transformers is not None and issubclass(self.model_cls, transformers.PreTrainedModel)

    def require_buildable(self, cfg: object, config: dict, what: object, **sizing: Any) -> None:
        """A transformers model of config `cfg` (from the dict `config`) sized before it is built
        (`hf_sizing.require_hf_buildable`: its fields, then a count on the meta device): a
        ResourceError with the estimate and the memory, or a CheckpointError (`sizing`'s stored)."""
        from minigpt.model.hf_sizing import require_hf_buildable

        to_dict = getattr(cfg, "to_dict", None)
        fields = {**(to_dict() if callable(to_dict) else {}), **config}  # the class's defaults count too
        require_hf_buildable(self.model_cls, cfg, fields, what, **sizing)

    @property
    def config_fields(self) -> list[str] | None:
        return _config_fields(self.config_cls)


MAX_CONFIG_BYTES = 1 << 24  # a config.json is a few KB; the cap --config has


def read_hf_config(path: Path, *, lead: str = "Not a Hugging Face model config: ") -> dict:
    """A folder's config.json as a dict; a ModelSpecError naming it when it is missing, too large,
    not JSON (nested too deeply included) or not an object."""
    from minigpt.io.files import os_error, stat_input
    from minigpt.io.jsonsafe import parse_json

    st = stat_input(path, "Hugging Face model config", error=ModelSpecError)
    if st.st_size > MAX_CONFIG_BYTES:
        raise ModelSpecError(f"{lead}{path} is {st.st_size:,} bytes, no model config (a few KB)", path=path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    data = parse_json(raw, path=path, error=ModelSpecError, lead=lead)
    if not isinstance(data, dict):
        raise ModelSpecError(f"{lead}{path} holds {type(data).__name__}, not an object", path=path)
    return data


def _config_fields(cls: type) -> list[str] | None:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    return [p for p in params if p not in ("self", "args", "kwargs")]


def _last_user_frame(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "see the model's constructor"
    f = frames[-1]
    return f"raised at {f.filename}:{f.lineno} ({f.line})"


def _import_module(target: str, spec: str) -> types.ModuleType:
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise ModelSpecError(f"--model {spec}: file not found: {path}", path=path)
        name = f"minigpt_user_model_{abs(hash(str(path)))}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        if module_spec is None or module_spec.loader is None:
            raise ModelSpecError(f"--model {spec}: {path} cannot be imported as a Python module", path=path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses need the module registered while it executes
        # the file's folder on sys.path, so `from mylayers import X` next to it works
        sys.path.insert(0, str(path.parent))
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(name, None)
            raise ModelSpecError(
                f"--model {spec}: importing {path} raised {type(exc).__name__}: {exc}",
                path=path,
                causes=[_last_user_frame(exc)],
            ) from None
        finally:
            sys.path.remove(str(path.parent))
        return module
    try:
        return importlib.import_module(target)
    except Exception as exc:
        raise ModelSpecError(
            f"--model {spec}: importing module {target!r} raised {type(exc).__name__}: {exc}",
            causes=["the package is not installed in this environment", "use FILE.py:CLASS for a file"],
        ) from None


def load_model_spec(spec: str) -> ModelSpec:
    if spec.startswith("hf:"):
        return _load_hf_folder(spec, spec[3:])
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise ModelSpecError(f"--model {spec!r}: expected FILE.py:CLASS[:CONFIG] or package.module:CLASS[:CONFIG]")
    target, class_name = parts[0], parts[1]
    config_name = parts[2] if len(parts) == 3 else None
    module = _import_module(target, spec)
    config_name = config_name or class_name + "Config"
    missing = [n for n in (class_name, config_name) if not hasattr(module, n)]
    if missing:
        available = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__)
        raise ModelSpecError(
            f"--model {spec}: {target} has no {' or '.join(missing)}; classes defined there: {available}",
            causes=["give the config class explicitly as FILE.py:CLASS:CONFIG"],
        )
    model_cls, config_cls = getattr(module, class_name), getattr(module, config_name)
    try:
        import torch.nn as nn

        if not (inspect.isclass(model_cls) and issubclass(model_cls, nn.Module)):
            raise ModelSpecError(f"--model {spec}: {class_name} is not a torch.nn.Module subclass")
    except ImportError:  # pragma: no cover
        pass
    _require_callable(spec, model_cls)
    return ModelSpec(spec, model_cls, config_cls, module.__name__)


def _require_callable(spec: str, model_cls: type) -> None:
    """Refuse, before anything runs, a forward the checks would have to call with arguments it
    would misread (the targets as a mask or a cache)."""
    from minigpt.model.contract import ModelContractError, forward_plan, unmatched_advice

    try:
        forward_plan(model_cls)
    except ModelContractError as exc:
        raise ModelSpecError(f"--model {spec}: {exc}", causes=unmatched_advice(model_cls)) from None


def _load_hf_folder(spec: str, folder: str) -> ModelSpec:
    """`hf:PATH`: a `save_pretrained` folder. Its config.json names the class (`architectures`);
    nothing is fetched from the hub."""
    path = Path(folder).expanduser().resolve()
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelSpecError(
            f"--model {spec}: {path} has no config.json",
            path=path,
            causes=["PATH is the folder model.save_pretrained(PATH) wrote (config.json + model.safetensors)"],
        )
    # a size, and JSON of any depth, are typed errors here, before transformers' own reader sees it
    read_hf_config(config_file, lead=f"--model {spec}: ")
    try:
        import transformers
    except ImportError:
        raise ModelSpecError(
            f"--model {spec}: reading a Hugging Face folder needs transformers",
            causes=["pip install 'minigpt-tui[hf]' (or pip install transformers)"],
        ) from None
    try:
        config = transformers.AutoConfig.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelSpecError(f"--model {spec}: {config_file} is not a transformers config: {exc}", path=path) from None
    names = list(getattr(config, "architectures", None) or [])
    model_cls = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), None)
    if model_cls is None:
        raise ModelSpecError(
            f"--model {spec}: {config_file} names no transformers model class (architectures: {names})",
            path=path,
            causes=[
                "save the model with model.save_pretrained(PATH), which records its class",
                "or name the class: --model transformers:CLASS:CONFIGCLASS --config PATH/config.json",
            ],
        )
    _require_callable(spec, model_cls)
    return ModelSpec(spec, model_cls, type(config), "transformers", folder=path)


def model_factory_for(spec: str | None) -> tuple[Callable[[dict], Any], ModelSpec | None]:
    if not spec:
        from minigpt.model.factory import default_model_factory

        return default_model_factory, None
    loaded = load_model_spec(spec)
    return loaded.factory, loaded
