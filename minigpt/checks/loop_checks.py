"""Loop checks on gradients and modes: what each step of the user's own loop, as `minigpt.watch`
recorded it in `logs/loop.jsonl`, does with its gradients (cleared, kept to the step, accumulated)
and in which mode its forwards run.

Every loop check reads the log only (no torch, no model), names the step where a problem first
showed, and says what it cannot see; without a watched run they skip, saying how to watch one.
The rest: `loop_schedule_checks` (the learning rate), `loop_data_checks`, `loop_optimizer_checks`.
"""

from __future__ import annotations

import math
import statistics

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.checks.watched import first_step, loop_values, mode_sensitive, watched_loop
from minigpt.loopwatch.loop_log import LoopLog

WEIGHT_TOLERANCE = 0.25  # |loss weight - expected| / expected within this is "as expected"
MISFIT_LIMIT = 0.25  # logits gradients further than this from a cross-entropy's form: the weight means nothing


# --- gradients: cleared, kept, accumulated ------------------------------------------------------


@check("loop_grads_cleared", "loop", "Your loop clears gradients between optimizer steps")
def loop_grads_cleared(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx)
    known = [s for s in log.steps if s["step"] > 1 and s.get("cleared_before") is not None]
    if len(known) < 2:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than 2 full readings after step 1 yet")
    stale = [s for s in known if s["cleared_before"] is False]
    values = loop_values(log, readings=len(known), not_cleared=len(stale), first_step=first_step(stale))
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
def loop_grads_reach_step(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx)
    lost = [s for s in log.steps if s["backwards"] > 0 and s.get("grads_at_step") in ("none", "zero")]
    within = [s for s in log.deep if (s.get("cleared_within") or 0) > 0]
    fp16 = any(s.get("autocast") == "float16" for s in log.steps) or log.header.get("scaler")
    values = loop_values(log, steps_without_gradients=len(lost), cleared_between_micro_batches=len(within))
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
def loop_accumulation(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    read = [s for s in log.deep if s.get("loss_weight") is not None]
    if not read:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: no gradient reached a logits tensor the model returned (the model's output has no "
            "(B, T, V) logits, or the loss is not computed from them)",
        )
    fitting = [s for s in read if s.get("loss_weight_misfit", 1.0) <= MISFIT_LIMIT]
    values = loop_values(log, readings=len(read))
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
def loop_train_mode(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    bad = [s for s in log.steps if s.get("train_in_eval_mode", 0) > 0]
    total = sum(s.get("train_forwards", 0) for s in log.steps)
    in_eval = sum(s.get("train_in_eval_mode", 0) for s in log.steps)
    n, modules = mode_sensitive(log)
    values = loop_values(log, training_forwards=total, in_eval_mode=in_eval, mode_sensitive_modules=modules)
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
def loop_eval_mode(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    total, steps = _eval_steps(log)
    bad = [s for s in steps if s.get("eval_in_train_mode", 0) > 0]
    in_train = sum(s.get("eval_in_train_mode", 0) for s in steps)
    n, modules = mode_sensitive(log)
    values = loop_values(log, eval_forwards=total, in_train_mode=in_train)
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
def loop_eval_no_grad(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    total, steps = _eval_steps(log)
    bad = [s for s in steps if s.get("eval_with_grad", 0) > 0]
    with_grad = sum(s.get("eval_with_grad", 0) for s in steps)
    values = loop_values(log, eval_forwards=total, with_grad=with_grad)
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
