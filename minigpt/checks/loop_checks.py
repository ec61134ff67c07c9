"""Loop checks: the user's own training loop, as `minigpt.watch` recorded it in `logs/loop.jsonl`.

Each check reads the log only (no torch, no model), names the step where a problem first showed,
and says what it cannot see. Without a watched run they skip, saying how to watch one.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter

from ..loopwatch.loop_log import LoopLog, read_loop_log
from .registry import check
from .result import Outcome, Status

WATCH_HINT = "add `watch = minigpt.watch(model, optimizer, workspace=RUN)` to your training loop"
MIN_STEPS = 3  # steps a check needs before it says anything
WEIGHT_TOLERANCE = 0.25  # |loss weight - expected| / expected within this is "as expected"
MISFIT_LIMIT = 0.25  # logits gradients further than this from a cross-entropy's form: the weight means nothing
CLIP_ALWAYS = 0.9  # clipped on at least this share of full readings: "nearly every step"
CLIP_SEVERE = 0.5  # ... and cut to less than this share of its norm (a mild trim early in training is usual)
GRAPHS_LEAK = 3  # earlier steps' graphs alive at once that say "kept alive"

_cache: dict[tuple, LoopLog | None] = {}


def _log(ctx, need_steps: int = MIN_STEPS) -> LoopLog:
    ws = ctx.ws
    path = ws.loop_log
    key: tuple
    try:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino)
    except OSError:
        key = (str(path), None)
    if key not in _cache:
        _cache.clear()  # one run at a time: the newest reading only
        _cache[key] = read_loop_log(ws)
    log = _cache[key]
    if log is None:
        raise Outcome(Status.SKIP, f"no watched loop in {ws.root} (logs/loop.jsonl): {WATCH_HINT}")
    if len(log.steps) < need_steps:
        why = f" ({log.errors[0].get('message', '')})" if log.errors else ""
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: {len(log.steps)} optimizer step(s) recorded, this check needs {need_steps}{why}",
        )
    return log


def _values(log: LoopLog, **more) -> dict:
    return {"writer": log.writer(), "steps": len(log.steps), "last_step": log.last_step, **more}


def _first(steps: list[dict]) -> int | None:
    return steps[0]["step"] if steps else None


def _sensitive(log: LoopLog) -> tuple[int, list[str]]:
    return int(log.header.get("mode_sensitive_count", 0)), list(log.header.get("mode_sensitive_modules", []))


# --- gradients: cleared, kept, accumulated ------------------------------------------------------


@check("loop_grads_cleared", "loop", "Your loop clears gradients between optimizer steps")
def loop_grads_cleared(ctx, run):
    log = _log(ctx)
    known = [s for s in log.steps if s["step"] > 1 and s.get("cleared_before") is not None]
    if len(known) < 2:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than 2 full readings after step 1 yet")
    stale = [s for s in known if s["cleared_before"] is False]
    values = _values(log, readings=len(known), not_cleared=len(stale), first_step=_first(stale))
    if not stale:
        return f"each step's first backward found the gradients cleared ({len(known)} full readings)", values
    status = Status.FAIL if len(stale) >= max(2, len(known) // 2) else Status.WARN
    raise Outcome(
        status,
        f"gradients were not cleared before {len(stale)} of {len(known)} steps read (first at step "
        f"{stale[0]['step']}): each step adds the previous steps' gradients",
        values=values,
        causes=["optimizer.zero_grad() missing from the loop", "zero_grad() on another optimizer or model"],
        fixes=["call optimizer.zero_grad(set_to_none=True) after optimizer.step() (or before the first backward)"],
    )


@check("loop_grads_reach_step", "loop", "The optimizer step sees the gradients the backward passes made")
def loop_grads_reach_step(ctx, run):
    log = _log(ctx)
    lost = [s for s in log.steps if s["backwards"] > 0 and s.get("grads_at_step") in ("none", "zero")]
    within = [s for s in log.deep if (s.get("cleared_within") or 0) > 0]
    fp16 = any(s.get("autocast") == "float16" for s in log.steps) or log.header.get("scaler")
    values = _values(log, steps_without_gradients=len(lost), cleared_between_micro_batches=len(within))
    if lost:
        raise Outcome(
            Status.FAIL,
            f"at {len(lost)} of {len(log.steps)} steps (first at step {lost[0]['step']}) the optimizer stepped with "
            "no gradients although backward() ran: they were cleared between backward() and step()",
            values={**values, "first_step": lost[0]["step"]},
            causes=["optimizer.zero_grad() one line too early: between loss.backward() and optimizer.step()"],
            fixes=["order the loop: zero_grad() -> forward -> backward() -> (clip) -> step()"],
        )
    deep = log.deep
    if within and len(within) >= max(2, len(deep) // 2) and not fp16:
        s = within[0]
        raise Outcome(
            Status.FAIL,
            f"gradients were cleared between micro-batches on {len(within)} of {len(deep)} full readings (first at "
            f"step {s['step']}): only the last {s['micro_batches']} of {s['backwards']} backward passes reach the step",
            values={**values, "first_step": s["step"]},
            causes=["optimizer.zero_grad() inside the gradient-accumulation loop"],
            fixes=["clear gradients once per optimizer step, outside the micro-batch loop"],
        )
    note = ""
    if within:
        why = "skipped float16 steps (GradScaler)" if fp16 else "irregular clearing"
        note = f"; {len(within)} window(s) with a clear between backward passes ({why})"
    return f"every step saw its backward passes' gradients ({len(log.steps)} steps){note}", values


@check("loop_accumulation", "loop", "Accumulated micro-batches add up to one mean loss")
def loop_accumulation(ctx, run):
    log = _log(ctx)
    read = [s for s in log.deep if s.get("loss_weight") is not None]
    if not read:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: no gradient reached a logits tensor the model returned (the model's output has no "
            "(B, T, V) logits, or the loss is not computed from them)",
        )
    fitting = [s for s in read if s.get("loss_weight_misfit", 1.0) <= MISFIT_LIMIT]
    values = _values(log, readings=len(read))
    if len(fitting) < max(1, len(read) // 2):
        misfit = statistics.median(s.get("loss_weight_misfit", 1.0) for s in read)
        raise Outcome(
            Status.WARN,
            f"unsure: the gradient at the logits is not a cross-entropy's (misfit {misfit:.2f}): another loss, label "
            "smoothing or an auxiliary loss; accumulation cannot be judged",
            values={**values, "misfit": misfit},
        )
    weight = statistics.median(s["loss_weight"] for s in fitting)
    k = int(statistics.median(s["micro_batches"] for s in fitting))
    values.update(loss_weight=weight, micro_batches=k)
    first = fitting[0]["step"]
    fp16_unscaled = not log.header.get("scaler") and any(s.get("autocast") == "float16" for s in fitting)

    def near(x: float, target: float) -> bool:
        return abs(x - target) <= WEIGHT_TOLERANCE * target

    if near(weight, 1.0):
        return (
            f"each step's gradient carries one mean loss (weight {weight:.2f} over {k} micro-batch"
            f"{'es' if k != 1 else ''}; read at {len(fitting)} steps)"
        ), values
    if fp16_unscaled and weight >= 8 and abs(math.log2(weight) - round(math.log2(weight))) < 0.35:
        raise Outcome(
            Status.WARN,
            f"unsure: the gradient carries {weight:.0f}x a mean loss under float16 autocast, which looks like a "
            "GradScaler's loss scale",
            values=values,
            fixes=["pass scaler=your_grad_scaler to minigpt.watch so the scale is divided out"],
        )
    if k >= 2 and near(weight, float(k)):
        raise Outcome(
            Status.FAIL,
            f"the loss is not divided by the {k} accumulated micro-batches: each step's gradient is {weight:.2f}x a "
            f"mean loss (from step {first})",
            values={**values, "first_step": first},
            causes=[f"loss.backward() on each micro-batch's mean loss without `loss / {k}`"],
            fixes=[f"backward on loss / {k} (nanoGPT: loss = loss / gradient_accumulation_steps)"],
        )
    if k >= 2 and near(weight, 1.0 / k):
        raise Outcome(
            Status.FAIL,
            f"the loss is divided by {k} twice: each step's gradient is {weight:.3f}x a mean loss (from step {first})",
            values={**values, "first_step": first},
            causes=["the loss divided by the accumulation count and the optimizer/LR scaled for it again"],
            fixes=[f"divide the micro-batch loss by {k} once"],
        )
    raise Outcome(
        Status.WARN,
        f"each step's gradient carries {weight:.3g}x a mean loss over {k} micro-batch(es) (from step {first}): the "
        "loss is scaled by a factor the loop chose",
        values={**values, "first_step": first},
        causes=["reduction='sum' (the weight is then the token count)", "a constant loss multiplier", "a wrong count"],
        fixes=["use the mean loss over the step's tokens, divided by the number of micro-batches"],
    )


# --- train and eval modes -----------------------------------------------------------------------


@check("loop_train_mode", "loop", "Training forwards run in train mode")
def loop_train_mode(ctx, run):
    log = _log(ctx)
    bad = [s for s in log.steps if s.get("train_in_eval_mode", 0) > 0]
    total = sum(s.get("train_forwards", 0) for s in log.steps)
    in_eval = sum(s.get("train_in_eval_mode", 0) for s in log.steps)
    n, modules = _sensitive(log)
    values = _values(log, training_forwards=total, in_eval_mode=in_eval, mode_sensitive_modules=modules)
    if not bad:
        return f"all {total} training forwards ran in train mode", values
    where = f"{in_eval} of {total} training forwards ran in eval mode (first at step {bad[0]['step']})"
    if n == 0:
        return f"{where}: harmless here, the model has no dropout or batch-norm module", values
    raise Outcome(
        Status.FAIL,
        f"{where}: dropout is off while training ({n} mode-sensitive module(s), e.g. {modules[0]})",
        values={**values, "first_step": bad[0]["step"]},
        causes=["model.eval() for validation never undone: model.train() missing after evaluation"],
        fixes=["call model.train() after every evaluation (before the next training forward)"],
    )


def _eval_steps(log: LoopLog) -> tuple[int, list[dict]]:
    total = sum(s.get("eval_forwards", 0) for s in log.steps)
    if total == 0:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: no evaluation forward seen yet (a forward of the model with no backward before the "
            "next step)",
        )
    return total, [s for s in log.steps if s.get("eval_forwards", 0) > 0]


@check("loop_eval_mode", "loop", "Evaluation forwards run in eval mode")
def loop_eval_mode(ctx, run):
    log = _log(ctx)
    total, steps = _eval_steps(log)
    bad = [s for s in steps if s.get("eval_in_train_mode", 0) > 0]
    in_train = sum(s.get("eval_in_train_mode", 0) for s in steps)
    n, modules = _sensitive(log)
    values = _values(log, eval_forwards=total, in_train_mode=in_train)
    if not bad:
        return f"all {total} evaluation forwards ran in eval mode", values
    where = f"{in_train} of {total} evaluation forwards ran in train mode (first before step {bad[0]['step']})"
    if n == 0:
        return f"{where}: harmless here, the model has no dropout or batch-norm module", values
    raise Outcome(
        Status.FAIL,
        f"{where}: dropout was on while evaluating, so validation losses are noisy and too high",
        values={**values, "first_step": bad[0]["step"]},
        causes=["model.eval() missing before evaluation"],
        fixes=["model.eval() before evaluating, model.train() after"],
    )


@check("loop_eval_no_grad", "loop", "Evaluation runs without building gradients")
def loop_eval_no_grad(ctx, run):
    log = _log(ctx)
    total, steps = _eval_steps(log)
    bad = [s for s in steps if s.get("eval_with_grad", 0) > 0]
    with_grad = sum(s.get("eval_with_grad", 0) for s in steps)
    values = _values(log, eval_forwards=total, with_grad=with_grad)
    if not bad:
        return f"all {total} evaluation forwards ran without gradients", values
    raise Outcome(
        Status.FAIL,
        f"{with_grad} of {total} evaluation forwards built an autograd graph that no backward used (first before "
        f"step {bad[0]['step']}): memory and time spent for nothing",
        values={**values, "first_step": bad[0]["step"]},
        causes=["evaluation outside torch.no_grad() / torch.inference_mode()"],
        fixes=["wrap evaluation in `with torch.no_grad():` (nanoGPT: @torch.no_grad() on estimate_loss)"],
    )


# --- the learning rate --------------------------------------------------------------------------


def _lr_series(log: LoopLog) -> list[list[float]]:
    return [[lr for lr in s.get("lrs", []) if isinstance(lr, int | float)] for s in log.steps]


@check("loop_lr_positive", "loop", "The learning rate is positive")
def loop_lr_positive(ctx, run):
    log = _log(ctx)
    series = _lr_series(log)
    negative = [s for s, lrs in zip(log.steps, series) if any(lr < 0 for lr in lrs)]
    zero = [s for s, lrs in zip(log.steps, series) if s["step"] > 1 and lrs and any(lr == 0 for lr in lrs)]
    if zero and log.finished:  # a schedule that decays to exactly 0 at its end (HF's cosine) is fine
        tail = 0
        for s in reversed(log.steps):
            if s in zero:
                tail += 1
            else:
                break
        if tail <= max(1, len(log.steps) // 50) and tail == len(zero):
            zero = []
    values = _values(log, negative_steps=len(negative), zero_steps=len(zero), first_lr=series[0] if series else None)
    if negative:
        raise Outcome(
            Status.FAIL,
            f"the learning rate is negative at {len(negative)} steps (first at step {negative[0]['step']}, "
            f"{negative[0]['lrs']}): the optimizer climbs the loss",
            values={**values, "first_step": negative[0]["step"]},
            causes=["a schedule that overshoots below zero (cosine with a wrong period, a sign error)"],
            fixes=["clamp the schedule at min_lr >= 0"],
        )
    if zero:
        raise Outcome(
            Status.FAIL,
            f"the learning rate is 0 at {len(zero)} of {len(log.steps)} steps (first at step {zero[0]['step']}): "
            "those steps change nothing",
            values={**values, "first_step": zero[0]["step"]},
            causes=["a warm-up multiplier of 0 that is never stepped", "lr=0 in a parameter group", "min_lr = 0 early"],
            fixes=["check the schedule's value at these steps; call scheduler.step() after optimizer.step()"],
        )
    lows = [min(lrs) for lrs in series if lrs]
    return f"positive at every step (from {min(lows):.3g} to {max(lows):.3g})", values


@check("loop_scheduler", "loop", "A learning-rate scheduler attached to the optimizer is stepped")
def loop_scheduler(ctx, run):
    log = _log(ctx, need_steps=10)
    groups = log.header.get("groups", [])
    attached = bool(log.header.get("scheduler")) or any(g.get("has_initial_lr") for g in groups)
    series = _lr_series(log)
    constant = all(lrs == series[0] for lrs in series)
    values = _values(log, scheduler_attached=attached, lr_constant=constant, lrs=series[0])
    if not attached:
        how = "constant" if constant else f"set by the loop, {len({tuple(x) for x in series})} distinct values"
        return f"no lr_scheduler attached; learning rate {how}", values
    if not constant:
        return f"the learning rate changes over the run ({len({tuple(x) for x in series})} distinct values)", values
    initial = [g.get("initial_lr") for g in groups]
    moved_at_start = any(
        isinstance(i, int | float) and abs(lr - i) > 1e-12 * max(1.0, abs(i)) for lr, i in zip(series[0], initial)
    )
    message = (
        f"the learning rate stayed {series[0]} for all {len(log.steps)} steps although a scheduler is attached"
        + (f" (its initial_lr is {initial}: it set a start value and never moved)" if moved_at_start else "")
    )
    raise Outcome(
        Status.FAIL if moved_at_start else Status.WARN,
        message,
        values={**values, "initial_lr": initial},
        causes=["scheduler.step() never called", "scheduler.step() once per epoch in a run shorter than an epoch"],
        fixes=["call scheduler.step() after each optimizer.step()"],
    )


@check("loop_warmup_ends", "loop", "The warm-up ends before the run does")
def loop_warmup_ends(ctx, run):
    log = _log(ctx, need_steps=10)
    lrs = [lrs[0] for lrs in _lr_series(log) if lrs]
    tail = lrs[-max(5, len(lrs) // 10) :]
    rising = len(tail) >= 2 and all(b > a for a, b in zip(tail, tail[1:]))
    values = _values(log, last_lr=lrs[-1], peak_lr=max(lrs), finished=log.finished)
    if not rising:
        return f"the learning rate is not rising at the end (last {lrs[-1]:.3g}, peak {max(lrs):.3g})", values
    if not log.finished:
        return f"still rising at step {log.last_step} while the run goes on (judged again when it ends)", values
    raise Outcome(
        Status.FAIL,
        f"the learning rate was still rising at the last step ({log.last_step}: {lrs[-1]:.3g}, over its last "
        f"{len(tail)} steps): the warm-up never ended",
        values=values,
        causes=["warmup_iters copied from a longer run (e.g. 2000 warm-up steps in a 500-step run)"],
        fixes=["warm up over ~1-10% of the steps the run really makes"],
    )


# --- data ---------------------------------------------------------------------------------------


@check("loop_batches_change", "loop", "Each step trains on new batches")
def loop_batches_change(ctx, run):
    log = _log(ctx, need_steps=5)
    per_step = [tuple(s.get("fingerprints") or ()) for s in log.steps]
    per_step = [fp for fp in per_step if fp]
    if len(per_step) < 5:
        raise Outcome(Status.SKIP, f"{log.writer()}: the model's forward got no integer token IDs to fingerprint")
    everything = [f for fp in per_step for f in fp]
    distinct = len(set(everything))
    values = _values(log, batches=len(everything), distinct=distinct)
    repeats = [i for i in range(1, len(per_step)) if per_step[i] == per_step[i - 1]]
    if distinct <= max(1, len(per_step[0])) and len(per_step) >= 5:
        raise Outcome(
            Status.FAIL,
            f"the same batch on every step: {len(everything)} micro-batches, {distinct} distinct (from step "
            f"{log.steps[0]['step']})",
            values=values,
            causes=["get_batch() re-seeds its generator on every call", "the batch is built once, outside the loop"],
            fixes=["seed once at start; draw a new batch inside the loop"],
        )
    if len(repeats) >= len(per_step) // 2 or distinct < len(everything) // 2:
        raise Outcome(
            Status.WARN,
            f"batches repeat: {distinct} distinct of {len(everything)} micro-batches, {len(repeats)} steps repeat "
            "the previous one",
            values=values,
            causes=["a data loader that restarts each epoch on a tiny dataset", "a seed reset inside the loop"],
        )
    return f"{distinct} distinct batches in {len(everything)} micro-batches", values


@check("loop_ranks_differ", "loop", "DDP ranks train on different batches")
def loop_ranks_differ(ctx, run):
    log = _log(ctx)
    world = int(log.header.get("world_size", 1))
    if world <= 1:
        raise Outcome(Status.SKIP, f"{log.writer()}: a single process (no DDP ranks to compare)")
    if not log.ranks:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: {world} ranks, but no logs/ranks/rank*.jsonl of this run here (ranks on other nodes "
            "write them on their own disks)",
        )
    mine = {s["step"]: s.get("fingerprints") or [] for s in log.steps}
    same: dict[int, float] = {}
    for rank, steps in sorted(log.ranks.items()):
        common = [st for st in steps if st in mine and mine[st] and steps[st]]
        if len(common) >= MIN_STEPS:
            same[rank] = sum(steps[st] == mine[st] for st in common) / len(common)
    values = _values(log, world_size=world, ranks_read=sorted(log.ranks), same_share=same)
    dupes = {r: share for r, share in same.items() if share >= 0.9}
    if dupes:
        r = min(dupes)
        raise Outcome(
            Status.FAIL,
            f"rank {r} trained on the same batches as rank 0 on {dupes[r]:.0%} of steps ({len(dupes)} of "
            f"{len(same)} ranks compared)",
            values=values,
            causes=["every rank seeds its data the same way", "no DistributedSampler (or set_epoch never called)"],
            fixes=["seed per rank (seed + rank) or shard the data with DistributedSampler"],
        )
    if not same:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than {MIN_STEPS} steps in common with the other ranks")
    return f"{len(same)} other rank(s) trained on different batches", values


@check("loop_targets_shifted", "loop", "Targets your loop passes are the inputs shifted by one")
def loop_targets_shifted(ctx, run):
    log = _log(ctx)
    steps = [s for s in log.steps if s.get("targets_equal") is not None]
    if not steps:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: the model never received targets of the inputs' shape (the loss is computed in the "
            "loop, which the watch cannot compare)",
        )
    name = steps[0].get("targets") or "targets"
    equal = statistics.median(s["targets_equal"] for s in steps)
    shifted = statistics.median(s["targets_shifted"] for s in steps)
    hf = str(log.header.get("model_class", "")).startswith("transformers.") or name == "labels"
    values = _values(log, argument=name, equal_share=equal, shifted_share=shifted, shifts_inside=hf)
    if hf:
        if equal >= 0.99:
            return "labels equal input_ids: the model shifts them inside, as Hugging Face models do", values
        if shifted >= 0.9:
            raise Outcome(
                Status.FAIL,
                f"labels are already shifted by one ({shifted:.0%}) and the model shifts them again: every target is "
                "two tokens ahead",
                values=values,
                causes=["labels built as input_ids[:, 1:] for a model that shifts internally (Hugging Face)"],
                fixes=["pass labels=input_ids"],
            )
    elif shifted >= 0.9:
        what = "targets" if name == "positional" else name
        return f"the {what} are the inputs shifted by one ({shifted:.0%} of positions)", values
    elif equal >= 0.99:
        raise Outcome(
            Status.FAIL,
            f"the {name} equal the inputs (from step {steps[0]['step']}): the model learns to copy its input",
            values=values,
            causes=["targets built from the same slice as the inputs: y = data[i:i+T] instead of data[i+1:i+T+1]"],
            fixes=["y = data[i + 1 : i + 1 + block_size]"],
        )
    raise Outcome(
        Status.WARN,
        f"unsure: the {name} match the inputs at {equal:.0%} and the shifted inputs at {shifted:.0%} of positions",
        values=values,
        causes=["a shift by more than one", "targets from another sequence", "a masked or packed format"],
    )


# --- the optimizer ------------------------------------------------------------------------------


@check("loop_optimizer_covers", "loop", "Every parameter that gets gradients is in an optimizer group")
def loop_optimizer_covers(ctx, run):
    log = _log(ctx)
    read = [s for s in log.deep if "outside_optimizer" in s]
    outside = [s for s in read if s["outside_optimizer"]]
    names = sorted({n for s in outside for n in s["outside_optimizer"]})
    values = _values(log, readings=len(read), outside=names)
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
def loop_weight_decay(ctx, run):
    log = _log(ctx, need_steps=0)
    decayed = [
        (i, g)
        for i, g in enumerate(log.header.get("groups", []))
        if (g.get("weight_decay") or 0) > 0 and g.get("one_d")
    ]
    values = _values(log, groups=log.header.get("groups", []))
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
def loop_clipping(ctx, run):
    log = _log(ctx)
    read = [s for s in log.deep if "clipped" in s and s["step"] > 3]
    if len(read) < 3:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than 3 full readings after step 3 yet")
    clipped = [s for s in read if s["clipped"]]
    share = len(clipped) / len(read)
    before = [s["grad_norm_before_clip"] for s in read if s.get("grad_norm_before_clip") is not None]
    after = [s["grad_norm_at_step"] for s in read if s.get("grad_norm_at_step") is not None]
    values = _values(log, readings=len(read), clipped_share=share)
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
def loop_memory(ctx, run):
    log = _log(ctx, need_steps=8)
    alive = [s.get("old_graphs_alive", 0) for s in log.steps]
    mem = [(s["step"], s["memory"]) for s in log.deep if s.get("memory")]
    values = _values(log, old_graphs_alive=alive[-1], max_old_graphs_alive=max(alive))
    if len(mem) >= 2:
        values.update(memory_first=mem[0][1], memory_last=mem[-1][1], memory_source=log.deep[-1].get("memory_source"))
    growing = alive[-1] >= GRAPHS_LEAK and alive[-1] >= alive[len(alive) // 2]
    if not growing:
        grew = f"; memory {mem[0][1] / 2**20:.0f} -> {mem[-1][1] / 2**20:.0f} MiB" if len(mem) >= 2 else ""
        return f"no earlier step's graph outlives it ({len(log.steps)} steps){grew}", values
    first = next(s["step"] for s in log.steps if s.get("old_graphs_alive", 0) >= GRAPHS_LEAK)
    counts = Counter(alive)
    raise Outcome(
        Status.FAIL,
        f"the autograd graphs of {alive[-1]} earlier steps are still alive at step {log.last_step} (from step "
        f"{first}): memory grows every step",
        values={**values, "first_step": first, "alive_counts": dict(counts.most_common(3))},
        causes=["a running total of the loss tensor (total += loss) instead of loss.item()", "losses kept in a list"],
        fixes=["accumulate loss.item() (or loss.detach()) for logging"],
    )
