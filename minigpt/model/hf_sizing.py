"""Sizing a Hugging Face model (`--model hf:PATH`, `transformers:CLASS:CONFIG`) before it is built.

A config.json someone else wrote may describe a model no machine holds (`vocab_size` 10**11) or one
whose building alone never ends (`n_layer` 10**6 makes millions of modules). Two steps, both before a
byte of weights is allocated:

1. `require_config_plausible`: a cheap bound from the config's own fields (layers, width, vocabulary,
   feed-forward width, under any of their common names), with no transformers import: more layers
   than `MAX_LAYERS`, or a lower bound on the parameters already past the machine's memory, is
   refused. It errs low: what it lets through, step 2 measures.
2. `require_hf_buildable`: the model built on torch's `meta` device (shapes, no storage: free in
   memory, milliseconds per layer), its parameters and buffers counted at the dtype they will have,
   and refused past the device's memory with the message minigpt's own models get
   (`memory.refuse_past_memory`); with the file's stored values, a config describing far more than
   the file holds is refused as minigpt's checkpoints are.

`--allow-large` lifts both (`memory.large_allowed`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from minigpt.errors import CheckpointError, ResourceError
from minigpt.io.files import describe_size
from minigpt.model.factory import BIG_BYTES
from minigpt.model.memory import FLOAT_BYTES, large_is_allowed, refuse_past_memory

MAX_LAYERS = 4096  # the deepest published models have a few hundred; each layer costs time to build, even on meta
# a field's common names across transformers' configs (GPT-2's, Llama's, T5's, ...)
LAYER_FIELDS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
WIDTH_FIELDS = ("hidden_size", "n_embd", "d_model", "dim")
VOCAB_FIELDS = ("vocab_size",)
INNER_FIELDS = ("intermediate_size", "n_inner", "ffn_dim", "d_ff")
DTYPE_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}  # a config's `dtype` / `torch_dtype`


@dataclass(frozen=True)
class FieldSizes:
    """The sizes a config states, each as (field name, value); None where it states none."""

    layers: tuple[str, int] | None
    width: tuple[str, int] | None
    vocab: tuple[str, int] | None
    inner: tuple[str, int] | None

    @classmethod
    def of(cls, config: Mapping[str, object]) -> FieldSizes:
        return cls(*(_field(config, names) for names in (LAYER_FIELDS, WIDTH_FIELDS, VOCAB_FIELDS, INNER_FIELDS)))

    def lower_bound(self) -> int:
        """Parameters the model has at least: the embedding (V x C) and, per layer, attention's query
        and output projections (2 x C x C) and the feed-forward's two matrices (2 x C x I, I = C when
        the config states none: hardly any transformer's is narrower). Real models hold more (GPT-2: 12 x C x C
        a layer)."""
        L, C, V = (v[1] if v else 0 for v in (self.layers, self.width, self.vocab))
        inner = self.inner[1] if self.inner else C
        return V * C + L * (2 * C * C + 2 * C * inner)

    def named(self) -> str:
        """The fields this config sizes with ("n_layer / n_embd / vocab_size"), for the causes."""
        return " / ".join(v[0] for v in (self.layers, self.width, self.vocab, self.inner) if v) or "size fields"


def _field(config: Mapping[str, object], names: tuple[str, ...]) -> tuple[str, int] | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return name, value
    return None


def config_dtype_bytes(config: Mapping[str, object], default: int = FLOAT_BYTES) -> int:
    """Bytes per weight of the dtype a config names (`dtype`, or `torch_dtype` before transformers 5)."""
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if isinstance(value, str) and value in DTYPE_BYTES:
            return DTYPE_BYTES[value]
    return default


def require_config_plausible(config: Mapping[str, object], what: object, *, item_bytes: int = FLOAT_BYTES) -> None:
    """Step 1: refuse, from the config's fields alone, a model with more than MAX_LAYERS layers or one
    whose lower bound already exceeds the machine's memory. A sub-config (`text_config`) counts too."""
    if large_is_allowed():
        return
    for part in [config, *(v for v in config.values() if isinstance(v, Mapping))]:
        sizes = FieldSizes.of(part)
        if sizes.layers is not None and sizes.layers[1] > MAX_LAYERS:
            name, layers = sizes.layers
            raise ResourceError(
                f"{what} describes {_count(layers)} layers ({name}), more than {MAX_LAYERS:,}: past any real model "
                "(the deepest have a few hundred), and building that many modules would take minutes to hours "
                "before any check ran; refused before building",
                path=what if isinstance(what, (str, os.PathLike)) else None,
                causes=[f"{name} is far too large (an edited or generated config)", "pass --allow-large to try anyway"],
            )
        bound = sizes.lower_bound()
        refuse_past_memory(
            bound * item_bytes,
            "cpu",
            what,
            f"at least {_count(bound)} parameters at {item_bytes} bytes each, from its {sizes.named()}",
            causes=[f"the config's {sizes.named()} are far too large"],
        )


@dataclass(frozen=True)
class MetaCount:
    parameters: int  # shared (tied) parameters counted once
    buffer_bytes: int


def meta_count(model_cls: type, config: object) -> MetaCount | None:
    """Parameters and buffer bytes of `model_cls(config)`, built on the meta device (no storage). None
    when the class cannot be built there: the real build that follows then raises its own error."""
    try:
        with torch.device("meta"):
            model = model_cls(config)
    except Exception:  # whatever it is, the real build that follows raises it again and reports it
        return None
    if not isinstance(model, nn.Module):
        return None
    return MetaCount(
        sum(p.numel() for p in model.parameters()),
        sum(b.numel() * b.element_size() for b in model.buffers()),
    )


def require_hf_buildable(
    model_cls: type,
    config: object,
    fields: Mapping[str, object],
    what: object,
    *,
    item_bytes: int = FLOAT_BYTES,
    stored: int | None = None,
    stored_at: object = None,
    device: str | torch.device = "cpu",
) -> MetaCount | None:
    """Steps 1 and 2 for `model_cls(config)` (`fields`: the config as the dict it came from), its
    weights at `item_bytes` each; with `stored` (the values `stored_at` holds), a config describing
    more than twice that, past BIG_BYTES, is a CheckpointError. Returns the count (None if unmeasured)."""
    require_config_plausible(fields, what, item_bytes=item_bytes)
    if large_is_allowed() and stored is None:
        return None
    count = meta_count(model_cls, config)
    if count is None:
        return None
    need = count.parameters * item_bytes
    if stored is not None and need > BIG_BYTES and count.parameters > 2 * stored:
        raise CheckpointError(
            f"Checkpoint {stored_at} does not fit its config: {what} describes {count.parameters:,} parameters "
            f"({describe_size(need)}) but the file holds {stored:,} values; refused before building",
            path=stored_at,
            causes=["the config saved with the weights was edited or belongs to another model"],
        )
    for target in dict.fromkeys(["cpu", str(device)]):  # built on the CPU, then moved to the check device
        refuse_past_memory(
            need + count.buffer_bytes,
            target,
            what,
            f"{count.parameters:,} parameters at {item_bytes} bytes each, counted on the meta device; "
            "the weights alone",
            causes=[f"the config's {FieldSizes.of(fields).named()} are far too large"],
        )
    return count


def _count(n: int) -> str:
    """A count for a message; a number too long to print (a hostile config's 10**5000) as its magnitude."""
    return f"{n:,}" if n < 10**30 else f"about 10**{int(math.log10(n))}"
