"""Talking to any model the way its forward wants to be called: `forward(idx, targets=None) ->
(logits, loss)` (the contract), a forward that takes only the inputs, or a Hugging Face causal LM
(`model(input_ids=..., labels=...)` returning an output object with `.logits`/`.loss`, its labels
shifted inside). Outputs may be a tuple, bare logits, a dict or an object with `.logits`; a config
a dataclass, an object or a dict. Shared by generation and the check engine."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelContractError(Exception):
    """The model's forward or config does not follow the contract."""


# the names other codebases give the same config fields (recipe, nanoGPT, GPT-2/HF, Llama)
CONFIG_ALIASES = {
    "block_size": (
        "block_size", "max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "seq_len", "context_length",
    ),
    "vocab_size": ("vocab_size", "n_vocab", "num_tokens"),
}  # fmt: skip

# what people call the targets argument: anything else in second place is not fed the targets
TARGET_NAMES = frozenset({"targets", "target", "y", "labels", "label", "tgt", "target_ids", "targets_ids", "y_true"})

CONTRACT = "forward(idx, targets=None) -> (logits, loss)"


def config_lookup(config: object, name: str) -> object | None:
    """`name` (or one of its aliases) from a config that is a dict, a dataclass or any object."""
    for key in CONFIG_ALIASES.get(name, (name,)):
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if value is not None:
            return value
    return None


def config_value(model: nn.Module, name: str) -> int:
    value = config_lookup(getattr(model, "config", None), name)
    if value is None:
        names = " / ".join(CONFIG_ALIASES.get(name, (name,)))
        raise ModelContractError(f"model.config has no {names}: it is needed to build inputs")
    return int(value)  # type: ignore[call-overload]


def unpack(out: object) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(logits, loss) from whatever forward returned."""
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0], (out[1] if len(out) > 1 else None)
    if isinstance(out, dict) and "logits" in out:
        return out["logits"], out.get("loss")
    if hasattr(out, "logits"):
        return out.logits, getattr(out, "loss", None)
    raise ModelContractError(f"forward returned {type(out).__name__}; expected (logits, loss) or logits")


def is_transformers_class(cls: type) -> bool:
    """A Hugging Face `PreTrainedModel` subclass, found by its class tree (transformers not imported)."""
    return any(c.__name__ == "PreTrainedModel" and c.__module__.startswith("transformers") for c in cls.__mro__)


def wraps_transformers(model: nn.Module) -> bool:
    """The model is, or holds, a Hugging Face model (a wrapper around one)."""
    return any(is_transformers_class(type(m)) for m in model.modules())


@dataclass(frozen=True)
class ForwardPlan:
    """How the checks call a model class's forward."""

    style: str  # "targets": forward(idx, targets); "inputs": forward(idx) only; "hf": input_ids=/labels=
    targets_keyword: str | None = None  # targets passed by this keyword (None: second positional)
    extra: tuple[tuple[str, object], ...] = ()  # keywords always passed (hf: use_cache=False)

    @property
    def takes_targets(self) -> bool:
        return self.style == "targets"


def _describe(sig: inspect.Signature) -> str:
    return "forward" + str(sig).replace("(self, ", "(").replace("(self)", "()")


_PLANS: dict[type, ForwardPlan] = {}


def forward_plan(cls: type) -> ForwardPlan:
    """Read `cls.forward`'s signature once and decide how to call it. A second parameter that is
    not targets-like (`attention_mask`, `past_key_values`, `mask`...) is never fed the targets.
    Raises ModelContractError, saying what to write, for a forward the checks cannot call."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _plan(cls)
    return plan


def _plan(cls: Any) -> ForwardPlan:
    try:
        sig = inspect.signature(cls.forward)
    except (TypeError, ValueError):  # a builtin or C-implemented forward: assume the contract
        return ForwardPlan("targets")
    params = [p for name, p in sig.parameters.items() if name != "self"]
    names = [p.name for p in params]
    hf_extra = (("use_cache", False),) if "use_cache" in names else ()
    if is_transformers_class(cls) or (names[:1] == ["input_ids"] and "labels" in names):
        return ForwardPlan("hf", extra=hf_extra)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not positional:
        if any(p.kind == p.VAR_POSITIONAL for p in params):
            return ForwardPlan("targets")  # forward(*args): assume the contract
        raise ModelContractError(
            f"{cls.__name__}.{_describe(sig)} takes no input tensor; write {CONTRACT}",
        )
    required = [p.name for p in positional[1:] if p.default is p.empty] + [
        p.name for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty
    ]
    second = positional[1] if len(positional) > 1 else None
    if second is not None and second.name in TARGET_NAMES:
        required = [name for name in required if name != second.name]
        if required:
            raise _unmatched(cls, sig, required)
        return ForwardPlan("targets")
    if required:
        raise _unmatched(cls, sig, required)
    keyword = next((p.name for p in params if p.name in TARGET_NAMES and p.kind != p.POSITIONAL_ONLY), None)
    if keyword is not None:
        return ForwardPlan("targets", targets_keyword=keyword)
    if second is None and any(p.kind == p.VAR_POSITIONAL for p in params):
        return ForwardPlan("targets")  # forward(idx, *args): assume the contract
    return ForwardPlan("inputs")


def _unmatched(cls: type, sig: inspect.Signature, required: list[str]) -> ModelContractError:
    return ModelContractError(
        f"{cls.__name__}.{_describe(sig)} needs {', '.join(required)}, which the checks cannot supply "
        "(they only have the input IDs and the targets)",
    )


def unmatched_advice(cls: type) -> list[str]:
    return [
        f"write {CONTRACT}, or wrap the model: class Wrapped(nn.Module): def forward(self, idx, targets=None): "
        f"logits = self.inner(idx, ...); return logits, F.cross_entropy(...)",
        "give the extra parameters defaults (mask=None) if the model works without them",
    ]


def call(
    model: nn.Module, idx: torch.Tensor, targets: torch.Tensor | None = None, notes: list[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run forward the way it wants and return (logits, loss). A model that returns no loss (or a
    Hugging Face model, whose `labels=` are shifted inside and so are not our targets) gets the
    standard cross-entropy of its logits against the targets, noted in `notes`. Logits a forward
    flattens to (B*T, V) when it is given targets are viewed back as (B, T, V), noted too."""
    plan = forward_plan(type(model))
    if plan.style == "hf":
        # by keyword: the second positional parameter is a cache or an attention mask
        logits, loss = unpack(model(input_ids=idx, **dict(plan.extra)))
        loss = None
        why = "Hugging Face model: called as model(input_ids=idx); loss = cross-entropy of .logits vs the targets"
    elif targets is not None and plan.takes_targets:
        out = model(idx, targets) if plan.targets_keyword is None else model(idx, **{plan.targets_keyword: targets})
        logits, loss = unpack(out)
        why = "forward returned no loss: used F.cross_entropy on its logits"
    else:
        logits, loss = unpack(model(idx))
        why = "forward takes no targets: used F.cross_entropy on its logits"
    if targets is not None and logits.dim() == 2 and logits.shape[0] == idx.numel() and idx.dim() == 2:
        # flattened to (B*T, V) for F.cross_entropy and returned that way, as in Karpathy's lecture
        # GPT: the rows are (b, t) in order, so the view back is exact
        logits = logits.view(*idx.shape, logits.shape[-1])
        flat = "forward(idx, targets) returns its logits flattened to (B*T, V): read back as (B, T, V)"
        if notes is not None and flat not in notes:
            notes.append(flat)
    if targets is not None and loss is None and logits.dim() == 3 and logits.shape[:2] == targets.shape:
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        if notes is not None and why not in notes:
            notes.append(why)
    return logits, loss


def call_with_loss(
    model: nn.Module, idx: torch.Tensor, targets: torch.Tensor, notes: list[str] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`call` where a loss is needed (to step an optimizer, to average). A forward that returns no
    loss and logits that cannot be read as (B, T, V) against the targets has no loss to compute:
    that is refused with the contract's error, which the check shows as its finding."""
    logits, loss = call(model, idx, targets, notes)
    if loss is None:
        raise ModelContractError(
            f"forward returned no loss, and its logits {list(logits.shape)} do not match the targets "
            f"{list(targets.shape)} as (B, T, V), so no cross-entropy can stand in for it"
        )
    return logits, loss


def hf_own_loss(model: nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A Hugging Face model's own loss the way it is meant to be asked for: `labels=input_ids`
    (it shifts them inside). Returns (logits, loss)."""
    plan = forward_plan(type(model))
    return unpack(model(input_ids=idx, labels=idx, **dict(plan.extra)))


def accepts_targets(model: nn.Module) -> bool:
    """Whether forward is fed the targets: `forward(self, x)` models (and Hugging Face models, whose
    labels mean something else) get only the inputs and the standard cross-entropy on their logits."""
    return forward_plan(type(model)).takes_targets


def token_embedding(model: nn.Module, vocab: int) -> nn.Module | None:
    """The model's token embedding: the first nn.Embedding with `vocab` rows, or None."""
    for module in model.modules():
        if isinstance(module, nn.Embedding) and module.num_embeddings == vocab:
            return module
    return None
