"""Checks on the backward pass and the optimizer: every trainable parameter gets a finite, nonzero
gradient, and one AdamW step moves every parameter by a sane amount (zero-initialised layers are
given a few steps before a still parameter counts as stuck)."""

from __future__ import annotations

import math

import torch

from minigpt.checks import adapter
from minigpt.checks.adamw import AdamW
from minigpt.checks.batch_checks import check_shape
from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.lr_probe_checks import run_learning_rate
from minigpt.checks.peers import (
    GRAD_PEER_FLOOR,
    UPDATE_PEER_FLOOR,
    far_below,
    grad_peer_ratios,
    kind,
    update_peer_ratios,
)
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status, name_list
from minigpt.checks.values import GradientsValues, OptimizerValues, UpdateRow
from minigpt.model.contract import token_embedding
from minigpt.model.gradstats import tensor_norms

ZERO_GRAD_RETRIES = 4  # optimizer steps a zero gradient may take to appear behind zero-initialised layers
ADAMW_EPS = 1e-8  # optimizer_update's AdamW, as torch's default
PROBED_MAX = 16  # parameters far below their peers whose hold on the loss is measured (two forwards each)
# a replacement that changes the eval loss by less than this (relative) means the loss ignores the parameter
IGNORED_REL = 1e-4


@check(
    "gradients", "gradients", "Every trainable parameter gets a finite, nonzero gradient", depends=("forward_shapes",)
)
def gradients(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    model = ctx.build_model().train()
    x, y = ctx.batch(B, T)
    _, loss = adapter.call_with_loss(model, x, y)
    loss.backward()
    rows, global_norm = adapter.grad_table(model)
    problems = {
        flag: [r["name"] for r in rows if flag in r["flags"]] for flag in ("frozen", "no_grad", "nonfinite", "zero")
    }
    notes = []
    if problems["zero"]:
        # zero-initialised layers (residual projections and the head, as in modded-nanogpt) give
        # the layers before them a zero gradient for the first steps only, one layer of zeros per
        # step: keep stepping while the zero set shrinks, and judge what is left
        opt = AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        recovered: list[str] = []
        for _ in range(ZERO_GRAD_RETRIES):
            opt.step()
            opt.zero_grad(set_to_none=True)
            adapter.call_with_loss(model, x, y)[1].backward()
            again = {r["name"]: r for r in adapter.grad_table(model)[0]}
            now = [n for n in problems["zero"] if "zero" not in again[n]["flags"]]
            recovered += now
            problems["zero"] = [n for n in problems["zero"] if n not in now]
            if not now or not problems["zero"]:
                break
        if recovered:
            notes.append(
                f"{len(recovered)} parameters had a zero gradient at initialisation only "
                f"(zero-initialised layers after them): {name_list(recovered)}"
            )
    values: GradientsValues = {
        "global_norm": global_norm,
        "parameters": len(rows),
        "missing_gradients": problems["no_grad"] + problems["frozen"],
        "nonfinite_gradients": problems["nonfinite"],
        "zero_gradients": problems["zero"],
        "notes": notes,
        "model": "fresh model (" + ("--config" if ctx.inputs.config_path else "debug shape or checkpoint config") + ")",
        "table": rows,
        "far_below_peers": [],
        "lowest_to_peers": None,
    }
    if any(problems.values()):
        parts = [f"{flag}: {name_list(names)}" for flag, names in problems.items() if names]
        causes = []
        if problems["frozen"]:
            causes.append("requires_grad=False on these parameters (frozen on purpose? then ignore)")
        if problems["no_grad"]:
            causes += [
                "a layer built in __init__ and unused in forward",
                "a stray .detach() or torch.no_grad() in forward",
            ]
        if problems["nonfinite"]:
            causes.append("a non-finite weight or an overflow (see nonfinite_localisation)")
        if problems["zero"]:
            causes.append("a dead path: output multiplied by zero, or ReLU units all inactive")
        raise Outcome(
            Status.FAIL,
            "; ".join(parts),
            values=values,
            causes=causes,
            fixes=["for n, p in model.named_parameters(): print(n, p.requires_grad, p.grad is None)"],
        )
    _embedding_rows(ctx, model, x, {**values})
    _far_below_peers(model, x, y, rows, values)
    tied = sum(1 for r in rows if r["tied_with"])
    return (
        f"{len(rows)} parameters all have finite nonzero gradients; global norm {global_norm:.3f}"
        + (f"; {tied} tied" if tied else "")
        + f" (measured on a {values['model']})"
    ), values


def _far_below_peers(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, rows: list, values: GradientsValues
) -> None:
    """A gradient orders of magnitude below its peers' (`peers.py`) is not a healthy small one. What
    it means is measured, not guessed: each such parameter is replaced by zeros and by random
    values, and the change of the loss read. A loss that moves although the gradient is
    nearly zero means the parameter sits on a flat stretch (a saturated gate or activation): a
    failure (of the parameter, or of a norm after it that cancels its scale: the two look alike from
    here, and the cause says both). A loss that does not move means it is ignored: a bias the softmax cancels (a key
    projection's) is harmless and noted; a whole weight matrix ignored means a cut or closed branch."""
    ratios = grad_peer_ratios(rows)
    if ratios:
        values["lowest_to_peers"] = min(ratios.items(), key=lambda nr: nr[1])
    low = far_below(ratios, GRAD_PEER_FLOOR)
    if not low:
        return
    moved = _loss_change_when_replaced(model, x, y, [n for n, _ in low[:PROBED_MAX]])
    shapes = {r["name"]: r["shape"] for r in rows}
    flat = [(n, r, moved[n]) for n, r in low if n in moved and moved[n] > IGNORED_REL]
    ignored = [(n, r) for n, r in low if n in moved and moved[n] <= IGNORED_REL]
    ignored_matrices = [n for n, _ in ignored if len(shapes[n]) >= 2]
    ignored_vectors = [n for n, _ in ignored if len(shapes[n]) < 2]
    values["far_below_peers"] = [
        {"name": n, "grad_to_peers": r, "loss_change_when_replaced": moved.get(n)} for n, r in low
    ]
    if len(low) > PROBED_MAX:
        values["notes"] = values["notes"] + [f"{len(low) - PROBED_MAX} more far below their peers, not probed"]

    def shown(items: list[tuple[str, float]]) -> str:
        return name_list([f"{n} ({r:.1e} of its peers')" for n, r in items], limit=3)

    behind = (
        f"; the loss ignores {len(ignored)} more behind them: {name_list([n for n, _ in ignored])}" if ignored else ""
    )
    if flat:
        raise Outcome(
            Status.FAIL,
            f"{len(flat)} parameter(s) get a gradient far below their peers' though the loss depends on them: "
            + shown([(n, r) for n, r, _ in flat])
            + behind,
            values=values,
            causes=[
                f"measured: replacing {flat[0][0]} changes the loss by {flat[0][2]:.2g} (relative), yet its gradient "
                f"is {flat[0][1]:.1e} of its peers': the loss is flat for it where it is, as at the flat end of a "
                "saturated sigmoid or tanh gate, a clamp or a ReLU off for every input, or behind a normalisation "
                "that cancels its scale (a BatchNorm or a second norm after it)"
            ],
            fixes=["initialise the gate or scale where it passes a gradient (sigmoid(0) = 0.5, not sigmoid(-30))"],
        )
    if ignored_matrices:
        raise Outcome(
            Status.WARN,
            f"the loss ignores {len(ignored_matrices)} weight matrix(es): {name_list(ignored_matrices)} "
            f"(replaced with zeros or random values, the loss changes by at most {IGNORED_REL:g} relative)",
            values=values,
            causes=[
                "measured: their gradient is orders of magnitude below their peers' and replacing them does not "
                "change the loss: their branch is cut, multiplied by a constant near zero, or normalised away; "
                "cause not determined beyond that"
            ],
            fixes=["print the branch's output scale in forward; look for a constant factor or a mask on it"],
        )
    if ignored_vectors:
        values["notes"] = values["notes"] + [
            f"the loss ignores {name_list(ignored_vectors)} (gradient {ignored[0][1]:.0e} of its peers', and "
            "replacing it does not change the loss): normalised away by what follows, as the softmax cancels a "
            "key projection's bias or a norm the bias before it; harmless, though it cannot learn"
        ]


def _loss_change_when_replaced(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, names: list[str]
) -> dict[str, float]:
    """For each parameter, the largest relative change of the loss when it is replaced by zeros and
    by standard normal values; a non-finite loss counts as a change of inf. Measured in the mode the
    gradient was taken in (train: a norm over the batch may cancel a parameter there and not in
    eval), every forward with the same seed so dropout draws the same masks; the parameters,
    buffers (a norm's running statistics) and the caller's random state are restored after."""
    params = dict(model.named_parameters())
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    gen = torch.Generator().manual_seed(0)

    def loss() -> float:
        torch.manual_seed(0)
        return float(adapter.call_with_loss(model, x, y)[1])

    out: dict[str, float] = {}
    devices = [x.device] if x.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        try:
            base = loss()
            for name in names:
                p = params[name]
                saved = p.detach().clone()
                change = 0.0
                for fill in (torch.zeros(p.shape), torch.randn(p.shape, generator=gen)):
                    p.copy_(fill.to(device=p.device, dtype=p.dtype))
                    now = loss()
                    change = max(change, abs(now - base) / max(1.0, abs(base)) if math.isfinite(now) else math.inf)
                p.copy_(saved)
                out[name] = change
        finally:
            for n, b in model.named_buffers():
                b.copy_(buffers[n])
    return out


def _embedding_rows(ctx: CheckContext, model: torch.nn.Module, x: torch.Tensor, values: dict) -> None:
    """Every token the batch holds must have an input-embedding row that can learn: looked up with
    its own ID (not clamped, wrapped or remapped onto another row) and not the embedding's
    padding_idx (whose row F.embedding never updates). A tied head hides both from the gradient
    table: the head still gives every row a gradient."""
    V = ctx.tokenizer.vocab_size
    emb = token_embedding(model, V)
    if emb is None:
        return
    present = sorted(set(x.flatten().tolist()))
    looked_up: list[torch.Tensor] = []
    handle = emb.register_forward_hook(lambda _m, inp, _out: looked_up.append(inp[0].detach().flatten()))
    try:
        with torch.no_grad():
            adapter.call(model, x)
    finally:
        handle.remove()
    if not looked_up:
        return  # the table is used another way (F.embedding on its weight): nothing to see here
    seen = set(torch.cat(looked_up).tolist())
    never = [t for t in present if t not in seen]
    padding = getattr(emb, "padding_idx", None)  # nn.Embedding's, normalised to a non-negative ID
    pad = int(padding) if padding is not None and int(padding) in present else None
    if not never and pad is None:
        return
    tok = ctx.tokenizer

    def named(ids: list[int]) -> str:
        shown = ", ".join(f"{tok.decode([i])!r} (ID {i})" for i in ids[:6])
        return shown + (f" and {len(ids) - 6} more" if len(ids) > 6 else "")

    if pad is not None:
        summary = f"embedding padding_idx={pad} is a real token, {named([pad])}: its input embedding never learns"
        causes = ["nn.Embedding(V, C, padding_idx=...) copied from code with a pad token; this vocabulary has none"]
        fixes = ["drop padding_idx (character vocabularies have no pad token), or add a pad ID outside the data"]
    else:
        summary = (
            f"{len(never)} token(s) in the batch are never looked up in the embedding: {named(never)}; "
            "their rows can never learn"
        )
        causes = [
            "the IDs are clamped, wrapped (% n) or remapped before the lookup (a table smaller than the vocabulary?)",
            "a lookup table built for another vocabulary",
        ]
        fixes = ["embed the IDs as they are: tok_emb = self.wte(idx), with nn.Embedding(vocab_size, n_embd)"]
    raise Outcome(
        Status.FAIL,
        summary,
        values={**values, "tokens_never_looked_up": never, "padding_idx": padding},
        causes=causes,
        fixes=fixes,
    )


@check(
    "optimizer_update", "optimization", "An AdamW step changes every parameter by a sane amount", depends=("gradients",)
)
def optimizer_update(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    B, T, _ = check_shape(ctx)
    model = ctx.build_model().train()
    x, y = ctx.batch(B, T)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    before = [p.detach().clone() for _, p in params]
    lr, lr_source = update_learning_rate(ctx)
    # decay on 2-D weights only, as `minigpt train` (and nanoGPT) group them: the update training makes
    opt = AdamW([p for _, p in params], lr=lr, weight_decay=0.1, decay_1d=False, eps=ADAMW_EPS)
    _, loss = adapter.call_with_loss(model, x, y)
    loss.backward()
    opt.step()
    with torch.no_grad():
        deltas = [p.detach() - old for (_, p), old in zip(params, before, strict=True)]
        stats = torch.stack([torch.stack(tensor_norms(deltas)), torch.stack(tensor_norms(before))]).cpu().tolist()
        reached = _reached_row_ratios(params, deltas, before)
    rows: list[UpdateRow] = []
    for i, (name, _) in enumerate(params):
        upd, w = stats[0][i], stats[1][i]
        rows.append({"name": name, "update_norm": upd, "weight_norm": w, "ratio": upd / w if w > 0 else None})
    grad_rms = {
        n: float(p.grad.detach().float().pow(2).mean().sqrt()) for n, p in params if p.grad is not None and p.numel()
    }
    unchanged = [r["name"] for r in rows if r["update_norm"] == 0]
    notes = []
    if unchanged:
        # a zero gradient at step 0 (zero-initialised layers downstream) leaves a parameter still
        # for the first steps only: keep stepping while parameters start to move
        still = set(unchanged)
        for _ in range(ZERO_GRAD_RETRIES):
            opt.zero_grad(set_to_none=True)
            adapter.call_with_loss(model, x, y)[1].backward()
            opt.step()
            with torch.no_grad():
                moved = torch.stack(
                    tensor_norms([p.detach() - old for (_, p), old in zip(params, before, strict=True)])
                ).tolist()
            now_still = {name for (name, _), m in zip(params, moved) if m == 0}
            if now_still == still or not now_still:
                still = now_still
                break
            still = now_still
        notes = (
            [f"moved only after the first step: {name_list([n for n in unchanged if n not in still])}"]
            if len(still) < len(unchanged)
            else []
        )
        unchanged = [n for n in unchanged if n in still]
    ratios = sorted(r["ratio"] for r in rows if r["ratio"] is not None and math.isfinite(r["ratio"]))
    median = ratios[len(ratios) // 2] if ratios else 0.0
    worst = max(rows, key=lambda r: r["ratio"] or 0.0) if rows else None
    values: OptimizerValues = {
        "learning_rate": lr,
        "learning_rate_source": lr_source,
        "median_update_ratio": median,
        "max_update_ratio": worst["ratio"] if worst else None,
        "max_ratio_parameter": worst["name"] if worst else None,
        "unchanged": unchanged,
        "update_size": math.sqrt(sum(r["update_norm"] ** 2 for r in rows)),
        "table": rows,
        "notes": notes,
        "far_below_peers": [],
        "lowest_to_peers": None,
    }
    if unchanged:
        raise Outcome(
            Status.FAIL,
            f"{len(unchanged)} parameters unchanged by the step: {name_list(unchanged)}",
            values=values,
            causes=["parameters not passed to the optimizer", "their gradient is zero or missing"],
            fixes=["torch.optim.AdamW(model.parameters(), ...)"],
        )
    if median > 0.5:
        raise Outcome(
            Status.FAIL,
            f"median update/weight ratio {median:.2f} at lr {lr:.3g} ({lr_source}): one step rewrites the weights",
            values=values,
            causes=["learning rate far too high", "no warmup"],
            fixes=["lower the learning rate (1e-3 to 3e-4 for small GPTs) and warm up"],
        )
    if median > 0.2:
        raise Outcome(
            Status.WARN,
            f"median update/weight ratio {median:.2f} at lr {lr:.3g} ({lr_source}) is large",
            values=values,
            causes=["a high learning rate"],
            fixes=["consider a lower peak learning rate or longer warmup"],
        )
    _updates_far_below_peers(rows, reached, grad_rms, {n: w for (n, _), w in zip(params, before, strict=True)}, values)
    return (
        f"all {len(rows)} parameters moved; median update/weight {median:.3g} at lr {lr:.3g} ({lr_source}); "
        "the first AdamW step of a fresh model, not of the checkpoint",
        values,
    )


def _reached_row_ratios(
    params: list[tuple[str, torch.nn.Parameter]], deltas: list[torch.Tensor], before: list[torch.Tensor]
) -> dict[str, float]:
    """For a matrix whose gradient reached only some rows (an embedding: the tokens in the batch),
    its update/weight ratio over those rows: the rows the batch never reached move by weight decay
    alone, which says nothing of how the parameter learns."""
    out = {}
    for (name, p), delta, old in zip(params, deltas, before, strict=True):
        if p.grad is None or p.grad.dim() != 2:
            continue
        rows = p.grad.detach().abs().sum(dim=1) != 0
        if bool(rows.any()) and not bool(rows.all()):
            w = float(old[rows].float().norm())
            if w > 0:
                out[name] = float(delta[rows].float().norm()) / w
    return out


def _updates_far_below_peers(
    rows: list[UpdateRow],
    reached: dict[str, float],
    grad_rms: dict[str, float],
    weights: dict[str, torch.Tensor],
    values: OptimizerValues,
) -> None:
    """An update/weight ratio orders of magnitude below its kind's median (`peers.py`; a sparse
    matrix over the rows its gradient reached) warns, with what was measured of it: its weights'
    scale against its peers' (`weights`, as they were before the step), and its gradient against
    AdamW's eps."""
    measured = [{**r, "ratio": reached.get(r["name"], r["ratio"])} for r in rows]
    shapes = {n: tuple(w.shape) for n, w in weights.items()}
    ratios = update_peer_ratios(measured, shapes)
    if ratios:
        values["lowest_to_peers"] = min(ratios.items(), key=lambda nr: nr[1])
    low = far_below(ratios, UPDATE_PEER_FLOOR)
    values["far_below_peers"] = [{"name": n, "update_to_peers": r} for n, r in low]
    if not low:
        return
    name, ratio = low[0]
    weight_rms = {n: float(w.float().pow(2).mean().sqrt()) for n, w in weights.items() if w.numel()}  # before the step
    peers = sorted(v for n, v in weight_rms.items() if kind(shapes[n]) == kind(shapes[name]) and v > 0)
    typical = peers[len(peers) // 2] if peers else 0.0
    causes = []
    if typical > 0 and weight_rms.get(name, 0.0) > 30 * typical:
        causes.append(
            f"measured: {name}'s weights are {weight_rms[name] / typical:.0f}x its peers' (RMS {weight_rms[name]:.3g} "
            f"against {typical:.3g}): AdamW moves each weight by about the learning rate, so a large stored value "
            "barely changes (a gain kept in other units, a scale initialised far from 1)"
        )
    if grad_rms.get(name, 1.0) < 10 * ADAMW_EPS:
        causes.append(
            f"measured: {name}'s gradient (RMS {grad_rms[name]:.2g}) is below AdamW's eps: the step is divided by "
            "eps rather than by the gradient's size"
        )
    if not causes:
        causes.append("cause not determined: its gradient and its weights' scale are within range of its peers'")
    raise Outcome(
        Status.WARN,
        f"{len(low)} parameter(s) barely move under the step: "
        + name_list([f"{n} ({r:.1e} of its peers' update/weight)" for n, r in low], limit=3),
        values=values,
        causes=causes,
        fixes=["store the parameter at the scale it is used at (divide in __init__, not in forward)"],
    )


def update_learning_rate(ctx: CheckContext) -> tuple[float, str]:
    """The rate optimizer_update steps at, and where it came from, in words: the run's peak rate when
    it is known (--lr, the checkpoint's settings, the log's peak), else the check's own; a fault
    that sets the rate wins over both."""
    run_lr, where = run_learning_rate(ctx)
    own = ctx.options.learning_rate
    base = run_lr if run_lr is not None else own
    lr = ctx.fault.learning_rate(base) if ctx.fault else base
    if ctx.fault and lr != base:
        return lr, f"set by the {ctx.fault.name} fault"
    if run_lr is not None:
        return lr, f"the run's, from {where}"
    return lr, f"the check's own lr {own:g}, not the run's: no checkpoint settings or logged lr to read (--lr LR)"
