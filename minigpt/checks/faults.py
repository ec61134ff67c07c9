"""Known bugs to inject (`--inject FAULT`), so a user can watch the right check fail and trust it.

Each fault is one object that knows where it applies: the token IDs (`splits`), the batches
(`batch`), the learning rate (`learning_rate`), the model factory used to load a checkpoint
(`checkpoint_factory`) or the model itself (`model`). The context calls every hook; a fault
overrides the ones it needs. It names the check it exists to trip (`intended`) and the checks
that may fail with it because they measure the same broken thing (`also_fails`).

No torch at import time: the fault menu and `--help` list these without loading torch; the
hooks import what they need when a check run calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minigpt.errors import ConfigError


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    intended: str
    also_fails: tuple[str, ...] = ()

    def splits(self, splits: dict, vocab_size: int) -> tuple[dict, str | None]:
        """The token IDs the checks read, by split."""
        return splits, None

    def batch(self, x: Any, y: Any) -> tuple[Any, Any]:
        """One batch of inputs and targets."""
        return x, y

    def learning_rate(self, default: float) -> float:
        """The learning rate of the optimizer and overfit checks."""
        return default

    def checkpoint_factory(self, factory: Callable[[dict], Any]) -> Callable[[dict], Any]:
        """The model factory a checkpoint is loaded into."""
        return factory

    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        """A built or loaded model; returns the (possibly wrapped) model and what was changed."""
        return model, None

    def refuse_for_user_model(self) -> str | None:
        """Why this fault cannot be injected into a user's --model class, if it cannot."""
        return None


class _NoShift(Fault):
    def batch(self, x: Any, y: Any) -> tuple[Any, Any]:
        return x, x.clone()  # the bug: targets are the inputs themselves


class _OutOfRangeToken(Fault):
    def splits(self, splits: dict, vocab_size: int) -> tuple[dict, str | None]:
        bad = splits["train"].clone().long()
        pos = bad.numel() // 2
        bad[pos] = vocab_size
        return {**splits, "train": bad}, f"train ID at position {pos} set to vocab_size={vocab_size}"


class _ValCopiesTrain(Fault):
    def splits(self, splits: dict, vocab_size: int) -> tuple[dict, str | None]:
        if "val" not in splits:
            return splits, "no val split to replace"
        n = min(splits["val"].numel(), splits["train"].numel())
        return {**splits, "val": splits["train"][:n].clone()}, f"val replaced by the first {n:,} train IDs"


class _NoCausalMask(Fault):
    def refuse_for_user_model(self) -> str | None:
        return (
            "--inject no_causal_mask needs the built-in MiniGPT's attention (a `causal` attribute); "
            "it cannot be injected into --model"
        )

    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        flagged = [m for m in model.modules() if hasattr(m, "causal")]
        if not flagged:
            raise ConfigError(self.refuse_for_user_model() or "")
        for m in flagged:
            m.causal = False
        return model, f"causal=False on {len(flagged)} attention modules"


class _LrTooHigh(Fault):
    def learning_rate(self, default: float) -> float:
        return 0.1


class _FrozenParameters(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        if not fresh:
            return model, None
        target = middle_weight_name(model).rsplit(".", 1)[0]
        frozen = [n for n, _ in model.named_parameters() if n.rsplit(".", 1)[0] == target]
        for n, p in model.named_parameters():
            if n in frozen:
                p.requires_grad_(False)
        return model, f"froze {', '.join(frozen)}"


class _WrongArchitecture(Fault):
    def checkpoint_factory(self, factory: Callable[[dict], Any]) -> Callable[[dict], Any]:
        def wider(cfg: dict) -> Any:
            changed = dict(cfg)
            key = (
                "embedding_dim"
                if "embedding_dim" in cfg
                else next(k for k, v in cfg.items() if isinstance(v, int) and not isinstance(v, bool))
            )
            changed[key] = cfg[key] * 2
            return factory(changed)

        return wider


class _DropoutOn(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch.nn as nn

        from minigpt.checks.fault_modules import AlwaysOnDropout

        replaced = []
        for name, module in list(model.named_modules()):
            for child_name, child in list(module.named_children()):
                if isinstance(child, nn.Dropout):
                    setattr(module, child_name, AlwaysOnDropout(0.2))
                    replaced.append(f"{name}.{child_name}".lstrip("."))
        return model, f"always-on dropout 0.2 in {len(replaced)} places"


class _OutputFault(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        if not fresh:
            return model, None
        from minigpt.checks.fault_modules import OutputFault

        return OutputFault(model, self.name), self.name


class _NanWeight(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch

        name = middle_weight_name(model)
        with torch.no_grad():
            dict(model.named_parameters())[name].view(-1)[0] = float("nan")
        return model, f"NaN in {name}"


class _SharedLayers(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch.nn as nn

        if not fresh:
            return model, None
        for name, module in model.named_modules():
            if isinstance(module, nn.ModuleList) and len(module) > 1 and len({type(m) for m in module}) == 1:
                for i in range(1, len(module)):
                    module[i] = module[0]  # the bug: nn.ModuleList([block] * n)
                return model, f"{name}[1:] replaced by {name}[0] (one block object at every layer)"
        raise ConfigError("--inject shared_layers needs a model with an nn.ModuleList of two or more layers")


class _LooseTensor(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch.nn as nn

        if not fresh:
            return model, None
        from minigpt.checks.fault_modules import LooseBias
        from minigpt.model.contract import config_lookup

        vocab = config_lookup(getattr(model, "config", None) or {}, "vocab_size")
        if not isinstance(vocab, int):
            vocab = next(m.num_embeddings for m in model.modules() if isinstance(m, nn.Embedding))
        return LooseBias(model, vocab), "a logit bias drawn at build time, held as a plain attribute"


class _RowsMixed(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch.nn as nn

        from minigpt.checks.fault_modules import mix_rows

        if not fresh:
            return model, None
        emb = next((m for m in model.modules() if isinstance(m, nn.Embedding)), None)
        if emb is None:
            raise ConfigError("--inject rows_mixed needs a model with an nn.Embedding")
        emb.register_forward_hook(mix_rows)
        return model, "the batch mean added to the token embeddings"


class _KeepProbDropout(Fault):
    def model(self, model: Any, *, fresh: bool) -> tuple[Any, str | None]:
        import torch.nn as nn

        changed = 0
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p, changed = 0.9, changed + 1
            if isinstance(getattr(module, "dropout", None), float):
                module.dropout, changed = 0.9, changed + 1
        return model, f"dropout 0.9 (a keep probability) in {changed} places"


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in [
        _NoShift("no_shift", "targets equal inputs (the shift by one token was forgotten)", "batch_shift"),
        _OutOfRangeToken("out_of_range_token", "one training ID equals vocab_size", "token_range", ("decoded_sample",)),
        _ValCopiesTrain("val_copies_train", "the validation split is a copy of training text", "split_overlap"),
        _NoCausalMask(
            "no_causal_mask",
            "attention without the causal mask: position t sees t+1",
            "causal_independence",
            ("initial_loss", "checkpoint_load", "generation_repetition"),
        ),
        _LrTooHigh(
            "lr_too_high",
            "learning rate 0.1 for the optimizer and overfit checks",
            "optimizer_update",
            ("single_batch_overfit",),
        ),
        _FrozenParameters("frozen_parameters", "one layer's parameters have requires_grad=False", "gradients"),
        _WrongArchitecture(
            "wrong_architecture", "the checkpoint is loaded into a model twice as wide", "checkpoint_load"
        ),
        _DropoutOn(
            "dropout_on",
            "dropout 0.2 that stays on in eval mode (F.dropout(training=True))",
            "eval_determinism",
            ("single_batch_overfit",),
        ),
        _OutputFault(
            "softmax_loss",
            "cross-entropy fed probabilities instead of logits",
            "loss_matches_logits",
            ("single_batch_overfit",),
        ),
        _OutputFault("transposed_logits", "logits returned as [B, V, T] instead of [B, T, V]", "forward_shapes"),
        _SharedLayers(
            "shared_layers", "one block object used as every layer (the layers share weights)", "shared_modules"
        ),
        _LooseTensor(
            "loose_tensor",
            "a random tensor the forward uses, held as a plain attribute (never saved)",
            "state_dict_complete",
        ),
        _RowsMixed(
            "rows_mixed", "rows of a batch mixed (the batch mean added to the embeddings)", "batch_independence"
        ),
        _KeepProbDropout(
            "keep_prob_dropout",
            "dropout 0.9 where 0.1 was meant (a keep probability)",
            "dropout_rates",
            ("single_batch_overfit",),
        ),
        _NanWeight(
            "nan_weight",
            "one weight set to NaN",
            "nonfinite_localisation",
            ("forward_shapes", "checkpoint_load", "generation_repetition"),
        ),
    ]
}


def middle_weight_name(model: Any) -> str:
    """A weight in the middle of the network (not the embeddings), for nan_weight / frozen_parameters."""
    names = [n for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n and "wte" not in n]
    if not names:
        names = [n for n, _ in model.named_parameters()]
    return names[len(names) // 2]
