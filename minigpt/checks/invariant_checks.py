"""Checks on properties every correct causal language model has, whatever its design: each layer
owns its weights, everything the forward reads is saved in the state dict, each row of a batch is
computed on its own along its own time axis, and dropout rates are drop probabilities.

None of these looks for a known bug: each measures the property and, when it does not hold, names
what the measurement shows (which paths share one module, which tensor differs between two builds,
which rows see which), then lists candidates as candidates.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.checks import adapter
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.independence_checks import _unzero
from minigpt.checks.locate import first_changed
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status

ROWS = 4  # rows of the batch-independence probe: each is changed once while the others are watched
SAME = 1e-5  # relative: two computations of the same numbers in the same order agree far closer


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a - b).abs().max().item() <= SAME * (1 + a.abs().max().item())


# -- shared_modules ----------------------------------------------------------------------------


def _groups(named: Iterable[tuple[str, object]]) -> list[list[str]]:
    """Paths that name the same object, for every object named more than once."""
    paths: dict[int, list[str]] = defaultdict(list)
    for name, obj in named:
        paths[id(obj)].append(name)
    return [names for names in paths.values() if len(names) > 1]


def _is_tie(model: nn.Module, names: list[str]) -> bool:
    """Weight tying as GPT-2, nanoGPT and most small LMs do it: one matrix that is both a token
    embedding and a linear output layer."""
    modules = dict(model.named_modules(remove_duplicate=False))
    owners = [modules.get(n.rsplit(".", 1)[0] if "." in n else "") for n in names]
    return any(isinstance(m, nn.Embedding) for m in owners) and any(isinstance(m, nn.Linear) for m in owners)


@check(
    "shared_modules",
    "model",
    "Each layer has weights of its own (a tied embedding and head aside)",
    depends=("forward_shapes",),
)
def shared_modules(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    model = ctx.build_model()
    modules = dict(model.named_modules(remove_duplicate=False))
    # a module with parameters at several paths: the layers listed run one set of weights
    shared = [
        names
        for names in _groups(model.named_modules(remove_duplicate=False))
        if any(True for _ in modules[names[0]].parameters())
    ]
    # keep the outermost: when blocks.0 is blocks.1, blocks.0.attn is blocks.1.attn too
    outer = [g for g in shared if not any(g is not h and all(_under(n, h) for n in g) for h in shared)]
    params = _groups(model.named_parameters(remove_duplicate=False))
    inside = {n for g in outer for path in g for n in _params_under(modules, path)}
    ties = [g for g in params if _is_tie(model, g)]
    other = [g for g in params if g not in ties and not set(g) <= inside]
    aliased = _aliased(model)
    values: dict[str, Any] = {
        "shared_modules": outer,
        "tied_parameters": ties,
        "other_shared_parameters": other,
        "aliased_parameters": aliased,
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    if aliased:
        shown = "; ".join(" and ".join(pair) for pair in aliased[:3])
        raise Outcome(
            Status.FAIL,
            f"distinct parameters over the same memory: {shown}: each gets its own gradient and its own "
            "optimizer state, and the optimizer steps that memory once for each",
            values=values,
            causes=[
                "a tie written on the tensors: a.weight.data = b.weight.data (or a view of another parameter "
                "wrapped in a new nn.Parameter)",
            ],
            fixes=["tie the Parameter itself: self.transformer.wte.weight = self.lm_head.weight"],
        )
    if outer:
        shown = "; ".join(" = ".join(g[:4]) + (" = ..." if len(g) > 4 else "") for g in outer[:3])
        raise Outcome(
            Status.FAIL,
            f"one module object is used at several paths, so those layers share one set of weights: {shown}",
            values=values,
            causes=[
                "a list of one block repeated: nn.ModuleList([Block(cfg)] * n) or [block] * n",
                "the same layer object assigned to several attributes",
                "deliberate cross-layer sharing (ALBERT, Universal Transformer)? then this is by design",
            ],
            fixes=["build each layer anew: nn.ModuleList([Block(cfg) for _ in range(n)])"],
        )
    if other:
        shown = "; ".join(" = ".join(g[:4]) for g in other[:3])
        raise Outcome(
            Status.WARN,
            f"parameters shared between layers that are not an embedding/output tie: {shown}",
            values=values,
            causes=["one nn.Parameter assigned to two modules", "deliberate sharing? then this is by design"],
            fixes=["give each layer its own nn.Parameter unless sharing is intended"],
        )
    tie = f"; tied: {' = '.join(ties[0])}" if ties else ""
    return f"every layer owns its weights{tie}", values


def _aliased(model: nn.Module) -> list[list[str]]:
    """Pairs of distinct Parameter objects whose memory overlaps. A tie is one Parameter at two
    paths, never two Parameters over one memory; views of a flat buffer that do not overlap pass."""
    spans = []
    for name, p in model.named_parameters():  # one name per Parameter object
        if p.numel():
            start = p.data_ptr()
            spans.append((str(p.device), start, start + p.numel() * p.element_size(), name))
    spans.sort()
    pairs = []
    for (device, _, end, name), (other_device, start, _, other) in zip(spans, spans[1:]):
        if device == other_device and start < end:
            pairs.append([name, other])
    return pairs


def _under(name: str, group: list[str]) -> bool:
    return any(name.startswith(path + ".") for path in group)


def _params_under(modules: dict[str, nn.Module], path: str) -> list[str]:
    module = modules[path]
    return [f"{path}.{n}" if path else n for n, _ in module.named_parameters(remove_duplicate=False)]


# -- state_dict_complete -----------------------------------------------------------------------


def _loose_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Tensors a module holds as plain attributes (or in a list, tuple or dict attribute): not
    parameters, not buffers, so never trained, saved or moved by .to(device)."""
    out: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_") and attr in ("_parameters", "_buffers", "_modules"):
                continue
            where = f"{path}.{attr}" if path else attr
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                out[where] = value
            elif isinstance(value, (list, tuple)):
                out.update({f"{where}[{i}]": v for i, v in enumerate(value) if isinstance(v, torch.Tensor)})
            elif isinstance(value, dict):
                out.update({f"{where}[{k!r}]": v for k, v in value.items() if isinstance(v, torch.Tensor)})
    return out


def _non_persistent(model: nn.Module) -> dict[str, torch.Tensor]:
    saved = set(model.state_dict())
    return {name: b for name, b in model.named_buffers() if name not in saved}


def _differ(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    return [
        name
        for name in a
        if name in b
        and (a[name].shape != b[name].shape or not torch.equal(a[name].detach().cpu(), b[name].detach().cpu()))
    ]


@check(
    "state_dict_complete",
    "model",
    "Everything the forward reads is saved: two builds given one state dict compute the same",
    depends=("forward_shapes",),
)
def state_dict_complete(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    seed = ctx.options.seed
    first, second = ctx.build_model(seed=seed + 11).eval(), ctx.build_model(seed=seed + 23).eval()
    try:
        second.load_state_dict(first.state_dict())
    except RuntimeError as exc:
        raise Outcome(Status.SKIP, f"a fresh build does not load its own state dict: {str(exc)[:200]}") from None
    x, _ = ctx.batch(B, T)
    with torch.no_grad():
        torch.manual_seed(0)  # dropout left on in eval mode draws the same masks in both
        a, _ = adapter.full_logits(first, x)
        torch.manual_seed(0)
        b, _ = adapter.full_logits(second, x)
    loose, buffers = _loose_tensors(first), _non_persistent(first)
    values: dict[str, Any] = {
        "max_logit_difference": (a - b).abs().max().item(),
        "loose_tensors": sorted(loose),
        "non_persistent_buffers": sorted(buffers),
    }
    differing = _differ(loose, _loose_tensors(second)) + _differ(buffers, _non_persistent(second))
    values["differing_between_builds"] = differing
    if not _close(a, b):
        named = f": {', '.join(differing[:4])} differs between the two builds" if differing else ""
        raise Outcome(
            Status.FAIL,
            "two fresh builds loaded with the same state dict give different logits "
            f"(max difference {values['max_logit_difference']:.3g}){named}",
            values=values,
            causes=(
                [f"{name} is a plain tensor attribute or a non-persistent buffer drawn at random" for name in differing]
                or ["a value drawn at build time that is not a tensor attribute (a Python float or list)"]
            )
            + ["so it is never trained, never saved, and a different value in every process that loads the run"],
            fixes=[
                "nn.Parameter(...) for a value that should train, self.register_buffer(name, t) for a constant to save"
            ],
        )
    note = f"; plain tensor attributes (not moved by .to(device)): {', '.join(sorted(loose)[:4])}" if loose else ""
    return f"two builds with one state dict agree (max difference {values['max_logit_difference']:.1e}){note}", values


# -- batch_independence ------------------------------------------------------------------------


def _changed_row(x: torch.Tensor, row: int, V: int, gen: torch.Generator) -> torch.Tensor:
    out = x.clone()
    shift = torch.randint(1, V, (x.shape[1],), generator=gen).to(x.device)
    out[row] = (out[row] + shift) % V
    return out


def _row_dependence(model: nn.Module, x: torch.Tensor, V: int) -> torch.Tensor:
    """seen[i, j]: row i's logits move when only row j's tokens change (dropout masks pinned)."""
    rows = x.shape[0]
    gen = torch.Generator().manual_seed(17)
    seen = torch.zeros(rows, rows, dtype=torch.bool)
    with torch.no_grad():
        torch.manual_seed(0)
        base, _ = adapter.full_logits(model, x)
        for j in range(rows):
            torch.manual_seed(0)
            other, _ = adapter.full_logits(model, _changed_row(x, j, V, gen))
            for i in range(rows):
                seen[i, j] = not _close(base[i], other[i])
    return seen


def _row(out: torch.Tensor, i: int, rows: int) -> torch.Tensor | None:
    """Row i of a module's output whose first axis is the batch (None for any other output)."""
    return out[i] if out.dim() >= 1 and out.shape[0] == rows else None


def _looks_back(model: nn.Module, x: torch.Tensor, V: int) -> bool:
    """Whether any later position's logits move when the first token changes."""
    changed = x.clone()
    changed[:, 0] = (changed[:, 0] + 1) % V
    with torch.no_grad():
        torch.manual_seed(0)
        base, _ = adapter.full_logits(model, x)
        torch.manual_seed(0)
        other, _ = adapter.full_logits(model, changed)
    return not _close(base[:, 1:], other[:, 1:])


def _placement_dependence(model: nn.Module, x: torch.Tensor) -> dict[str, Any] | None:
    """Where a row sits in the batch must not matter: with the rows reversed, then rolled by one,
    each row's logits must be the ones it had at its old index (eval mode; dropout is off there,
    and a model whose eval passes differ is eval_determinism's finding, not this one's). The first
    row that moved with a different result, where it moved, and by how much; None when none did."""
    rows = x.shape[0]
    with torch.no_grad():
        torch.manual_seed(0)
        base, _ = adapter.full_logits(model, x)
        torch.manual_seed(1)  # another seed: randomness left on in eval mode shows here, not as a placement
        again, _ = adapter.full_logits(model, x)
        if not _close(base, again):
            return None
        for order in (list(range(rows - 1, -1, -1)), [(k + 1) % rows for k in range(rows)]):
            torch.manual_seed(0)
            moved, _ = adapter.full_logits(model, x[order])
            for k, old in enumerate(order):
                if not _close(moved[k], base[old]):
                    change = (moved[k] - base[old]).abs().max().item()
                    return {"row": old, "moved_to": k, "max_change": change, "order": order}
    return None


def _checkpoint_looks_back(ctx: CheckContext, x: torch.Tensor, V: int) -> bool | None:
    """`_looks_back` on the checkpoint's weights (eval mode, its mode restored), or None where there
    is no checkpoint that loads with finite weights."""
    if not ctx.has_checkpoint:
        return None
    try:
        inspected = ctx.inspected_model(require_finite=True)
    except Outcome:
        return None
    if inspected.source != "checkpoint":
        return None
    model, was_training = inspected.model, inspected.model.training
    model.eval()
    try:
        return _looks_back(model, x, V)
    finally:
        model.train(was_training)


@check(
    "batch_independence",
    "model",
    "Each row of a batch is computed on its own, along its own time axis",
    depends=("forward_shapes",),
)
def batch_independence(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    _, T, V = check_shape(ctx)
    model = ctx.build_model()
    values: dict[str, Any] = {"rows": ROWS, "unzeroed_parameters": _unzero(model)}
    x, _ = ctx.batch(ROWS, T)
    found: dict[str, torch.Tensor] = {}
    for mode in ("eval", "train"):  # train mode with its dropout masks pinned: only real mixing shows
        model.train(mode == "train")
        seen = _row_dependence(model, x, V)
        off = seen & ~torch.eye(ROWS, dtype=torch.bool)
        values[f"rows_seen_{mode}"] = off.tolist()
        if off.any():
            found[mode] = off
    model.eval()
    looks_back = _looks_back(model, x, V)
    values["later_positions_depend_on_the_first"] = looks_back
    placement = None if found else _placement_dependence(model, x)
    values["placement_dependence"] = placement
    if placement is not None:
        raise Outcome(
            Status.FAIL,
            f"row {placement['row']}'s logits change when it moves to index {placement['moved_to']} of the batch "
            f"(max change {placement['max_change']:.3g}), its tokens and the other rows the same: the model "
            "depends on where a row sits in the batch",
            values=values,
            causes=[
                "measured: no row's logits move when another row's tokens change, yet they move with the row's "
                "index; cause not determined beyond that: something indexed by the batch position (a table or "
                "bias looked up with arange(B), positions counted over the flattened B*T sequence, a per-row "
                "state kept between calls)"
            ],
            fixes=["compute positions per row: pos = torch.arange(T) broadcast over the batch, never arange(B*T)"],
        )
    if found:
        mode = "eval" if "eval" in found else "train"
        off = found[mode]
        i, j = (int(v) for v in off.nonzero()[0])
        lower = bool(off.any()) and not off.triu().any()  # each row sees only rows before it
        where = " (in train mode only)" if set(found) == {"train"} else ""
        measured = [f"row {i}'s logits change when only row {j}'s tokens change{where}"]
        model.train(mode == "train")
        origin = first_changed(
            model, x, _changed_row(x, j, V, torch.Generator().manual_seed(17)), lambda out: _row(out, i, ROWS)
        )
        model.eval()
        values["mixing_enters_at"] = origin
        if lower:
            measured.append("each row depends on the rows before it in the batch, like a causal mask over rows")
        if not looks_back:
            measured.append("no position depends on earlier tokens of its own row")
        causes = [f"measured: row {j} first reaches row {i} at {origin}"] if origin else []
        if lower and not looks_back:
            causes.append(
                "attention runs along the batch axis instead of time: a (T, B, C) layer fed (B, T, C) "
                "(nn.MultiheadAttention without batch_first=True), its causal mask sized from x.size(0)"
            )
        causes += [
            "a layer that mixes rows: BatchNorm, or a mean/softmax/normalisation over dim 0",
            "a reshape that interleaves batch and time (view where a transpose was needed)",
        ]
        raise Outcome(
            Status.FAIL,
            "; ".join(measured) + ": rows of a batch see each other",
            values=values,
            causes=causes,
            fixes=[
                "nn.MultiheadAttention(..., batch_first=True) or transpose to (T, B, C) and back",
                "normalise over channels only (LayerNorm/RMSNorm)",
            ],
        )
    if not looks_back:
        trained = _checkpoint_looks_back(ctx, x, V)
        values["checkpoint_later_positions_depend_on_the_first"] = trained
        if trained:  # a property of these fresh weights only: the user's trained model uses context
            values["notes"] = [
                "the fresh model's later positions ignore the first token, the checkpoint's do not: "
                "judged on the checkpoint"
            ]
            return f"each of {ROWS} rows is computed on its own; the checkpoint's positions use earlier tokens", values
        on = "the fresh model" + (" or the checkpoint" if trained is False else "")
        raise Outcome(
            Status.FAIL,
            f"no position's logits depend on any earlier token of its row, on {on}: the model cannot use context",
            values=values,
            causes=[
                "attention computed along the wrong axis (batch or channels instead of time)",
                "the attention output discarded (a residual that skips it, or its result never added)",
            ],
            fixes=["check the attention's input layout and that its output is added to the residual stream"],
        )
    return (
        f"each of {ROWS} rows is unchanged when another row changes, in eval and train mode, and when it moves "
        "to another index of the batch",
        values,
    )


# -- dropout_rates -----------------------------------------------------------------------------

KEEP_LIKE = 0.5  # a drop probability above this removes most activations: a keep probability's value
DROPOUT_WORDS = ("dropout", "pdrop", "drop_rate", "drop_prob")
DROPOUT_LAYERS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _rates(model: nn.Module, config: dict) -> dict[str, float]:
    """Every dropout probability the config and the model declare, by where it was found."""
    rates: dict[str, float] = {}
    for key, value in config.items():
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and any(w in key.lower() for w in DROPOUT_WORDS)
        ):
            rates[f"config {key}"] = float(value)
    for path, module in model.named_modules():
        if isinstance(module, DROPOUT_LAYERS):
            rates[f"{path or 'model'} ({type(module).__name__})"] = float(module.p)
        for attr, value in vars(module).items():
            number = isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool))
            if number and any(word in attr.lower() for word in DROPOUT_WORDS):
                rates[f"{path}.{attr}" if path else attr] = float(value)
    return rates


def _by_rate(rates: dict[str, float]) -> str:
    """'p = 0.1 in config dropout, drop (Dropout) and 4 more; p = 0 in ...'"""
    places: dict[float, list[str]] = defaultdict(list)
    for where, rate in rates.items():
        places[rate].append(where)
    parts = []
    for rate, found in sorted(places.items(), key=lambda kv: -kv[0]):
        more = f" and {len(found) - 2} more" if len(found) > 2 else ""
        parts.append(f"p = {rate:g} in {', '.join(found[:2])}{more}")
    return "; ".join(parts)


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    logits, _ = adapter.full_logits(model, x)
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)).item()


@check(
    "dropout_rates",
    "model",
    "Dropout rates are drop probabilities; train and eval mode differ by them only",
    depends=("forward_shapes",),
)
def dropout_rates(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    inspected = ctx.inspected_model(require_finite=True)
    model = inspected.model
    rates = _rates(model, ctx.base_config())
    x, y = ctx.batch(B, T)
    was_training = model.training
    with torch.no_grad():
        model.eval()
        eval_loss = _loss(model, x, y)
        model.train()
        torch.manual_seed(0)
        train_loss = _loss(model, x, y)
    model.train(was_training)
    values: dict[str, Any] = {
        "rates": rates,
        "model": inspected.label,
        "eval_loss": eval_loss,
        "train_mode_loss": train_loss,
        "train_minus_eval": train_loss - eval_loss,
    }
    high = {where: p for where, p in rates.items() if math.isfinite(p) and p > KEEP_LIKE}
    gap = f"train-mode loss {train_loss:.3f} vs eval {eval_loss:.3f} on one batch ({inspected.label})"
    if high:
        raise Outcome(
            Status.FAIL,
            f"dropout drops most activations: {_by_rate(high)}; {gap}",
            values=values,
            causes=[
                "a keep probability where PyTorch takes the drop probability (0.9 meant as 'keep 90 %')",
                "a rate meant for another framework's convention (TensorFlow 1's keep_prob)",
            ],
            fixes=[f"dropout = {1 - max(high.values()):.2g} (p is the probability of dropping a unit)"],
        )
    return f"{_by_rate(rates) or 'no dropout found'}; {gap}", values
