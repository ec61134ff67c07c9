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
from minigpt.checks.peer_probes import ADAMW_EPS, far_below_peers, reached_row_ratios, updates_far_below_peers
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status, name_list
from minigpt.checks.values import GradientsValues, OptimizerValues, UpdateRow
from minigpt.model.contract import token_embedding
from minigpt.model.gradstats import tensor_norms

ZERO_GRAD_RETRIES = 4  # optimizer steps a zero gradient may take to appear behind zero-initialised layers


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
    far_below_peers(model, x, y, rows, values)
    tied = sum(1 for r in rows if r["tied_with"])
    return (
        f"{len(rows)} parameters all have finite nonzero gradients; global norm {global_norm:.3f}"
        + (f"; {tied} tied" if tied else "")
        + f" (measured on a {values['model']})"
    ), values


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
        reached = reached_row_ratios(params, deltas, before)
    rows: list[UpdateRow] = []
    for i, (name, _) in enumerate(params):
        upd, w = stats[0][i], stats[1][i]
        rows.append({"name": name, "update_norm": upd, "weight_norm": w, "ratio": upd / w if w > 0 else None})
    with_grad = [(n, p.numel(), p.grad.detach().float()) for n, p in params if p.grad is not None and p.numel()]
    with torch.no_grad():  # one batched norm and one host transfer, not a sync per parameter
        norms = torch.stack(tensor_norms([g for _, _, g in with_grad])).cpu().tolist() if with_grad else []
    grad_rms = {n: norm / math.sqrt(numel) for (n, numel, _), norm in zip(with_grad, norms, strict=True)}
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
    updates_far_below_peers(rows, reached, grad_rms, {n: w for (n, _), w in zip(params, before, strict=True)}, values)
    return (
        f"all {len(rows)} parameters moved; median update/weight {median:.3g} at lr {lr:.3g} ({lr_source}); "
        "the first AdamW step of a fresh model, not of the checkpoint",
        values,
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
