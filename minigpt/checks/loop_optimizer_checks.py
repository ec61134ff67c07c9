"""Loop checks on the optimizer step of a watched loop: every parameter with a gradient in a group,
no decay on norms and biases, clipping that is not constant, no earlier step's graph kept alive
(see `loop_checks`).
"""

from __future__ import annotations

import statistics
from collections import Counter

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.checks.watched import CLIP_AFTER_STEP, clip_readings, loop_values, watched_loop

CLIP_ALWAYS = 0.9  # clipped on at least this share of full readings: "nearly every step"
CLIP_SEVERE = 0.5  # ... and cut to less than this share of its norm (a mild trim early in training is usual)
GRAPHS_LEAK = 3  # earlier steps' graphs alive at once that say "kept alive"


@check("loop_optimizer_covers", "loop", "Every parameter that gets gradients is in an optimizer group")
def loop_optimizer_covers(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx)
    read = [s for s in log.deep if "outside_optimizer" in s]
    outside = [s for s in read if s["outside_optimizer"]]
    names = sorted({n for s in outside for n in s["outside_optimizer"]})
    values = loop_values(log, readings=len(read), outside=names)
    if not outside:
        return f"every parameter with a gradient is in an optimizer group ({len(read)} readings)", values
    raise Outcome(
        Status.FAIL,
        f"{len(names)} parameter(s) get gradients but are in no optimizer group, so they never train: "
        f"{', '.join(names[:4])}{'...' if len(names) > 4 else ''} (from step {outside[0]['step']})",
        values={**values, "first_step": outside[0]["step"]},
        causes=["the optimizer was built over part of the model (a submodule, or before a layer was added)"],
        fixes=["build the optimizer from model.parameters() after the model is complete"],
    )


@check("loop_weight_decay", "loop", "No weight decay on norms and biases")
def loop_weight_decay(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, need_steps=0)
    decayed = [
        (i, g)
        for i, g in enumerate(log.header.get("groups", []))
        if (g.get("weight_decay") or 0) > 0 and g.get("one_d")
    ]
    values = loop_values(log, groups=log.header.get("groups", []))
    if not decayed:
        return "no 1-D parameter (norm gain, bias) is in a group with weight decay", values
    i, g = decayed[0]
    raise Outcome(
        Status.WARN,
        f"weight decay {g['weight_decay']:g} on {g.get('one_d_count', len(g['one_d']))} 1-D parameter(s) of group {i} "
        f"(e.g. {g['one_d'][0]}): a choice, not a bug; nanoGPT and Hugging Face exclude norms and biases",
        values=values,
        fixes=["two groups: weight decay for dim >= 2 parameters, 0.0 for the rest (nanoGPT configure_optimizers)"],
    )


@check("loop_clipping", "loop", "Gradient clipping does not fire on nearly every step")
def loop_clipping(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx)
    read = clip_readings(log)
    if len(read) < 3:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than 3 full readings after step {CLIP_AFTER_STEP} yet")
    clipped = [s for s in read if s["clipped"]]
    share = len(clipped) / len(read)
    before = [s["grad_norm_before_clip"] for s in read if s.get("grad_norm_before_clip") is not None]
    after = [s["grad_norm_at_step"] for s in read if s.get("grad_norm_at_step") is not None]
    values = loop_values(log, readings=len(read), clipped_share=share)
    if before:
        values["median_norm_before"] = statistics.median(before)
    if after:
        values["median_norm_after"] = statistics.median(after)
    factors = [s["clip_factor"] for s in clipped if s.get("clip_factor") is not None]
    factor = statistics.median(factors) if factors else 1.0
    values["median_clip_factor"] = factor
    if share < CLIP_ALWAYS or factor >= CLIP_SEVERE:
        trim = f" (cut to a median {factor:.2g} of its norm when it fired)" if clipped else ""
        return f"clipped at {len(clipped)} of {len(read)} full readings{trim}", values
    raise Outcome(
        Status.FAIL,
        f"clipping fired at {len(clipped)} of {len(read)} full readings (from step {clipped[0]['step']}), cutting "
        f"the gradient to a median {factor:.2g} of its norm: the update size is set by the clip, not the gradient",
        values={**values, "first_step": clipped[0]["step"]},
        causes=[
            "a learning rate or loss scale too high",
            "a clip threshold far below the usual gradient norm",
            "the model is not learning (the gradient keeps its initial size: see the other loop checks)",
            "gradients inflated by a loop bug: an undivided accumulated loss (loop_accumulation), gradients never "
            "cleared (loop_grads_cleared); clipping then hides it",
        ],
        fixes=["lower the LR or raise max_norm until clipping fires only on spikes"],
    )


@check("loop_memory", "loop", "No step keeps earlier steps' graphs alive")
def loop_memory(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, need_steps=8)
    # graphs are followed at full readings (the first three steps, then every `interval`-th)
    alive = [s.get("old_graphs_alive", 0) for s in log.deep]
    mem = [(s["step"], s["memory"]) for s in log.deep if s.get("memory")]
    values = loop_values(log, old_graphs_alive=alive[-1], max_old_graphs_alive=max(alive))
    if len(mem) >= 2:
        values.update(memory_first=mem[0][1], memory_last=mem[-1][1], memory_source=log.deep[-1].get("memory_source"))
    growing = alive[-1] >= GRAPHS_LEAK and alive[-1] >= alive[len(alive) // 2]
    if not growing:
        grew = f"; memory {mem[0][1] / 2**20:.0f} -> {mem[-1][1] / 2**20:.0f} MiB" if len(mem) >= 2 else ""
        return f"no earlier step's graph outlives it ({len(log.steps)} steps){grew}", values
    first = next(s["step"] for s in log.deep if s.get("old_graphs_alive", 0) >= GRAPHS_LEAK)
    counts = Counter(alive)
    raise Outcome(
        Status.FAIL,
        f"the autograd graphs of {alive[-1]} earlier steps (of those followed) are still alive at step "
        f"{log.deep[-1]['step']} (from step {first}): memory grows every step",
        values={**values, "first_step": first, "alive_counts": dict(counts.most_common(3))},
        causes=["a running total of the loss tensor (total += loss) instead of loss.item()", "losses kept in a list"],
        fixes=["accumulate loss.item() (or loss.detach()) for logging"],
    )
