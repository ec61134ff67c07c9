"""Checks that train or load: single-batch overfit, checkpoint loading, the logged training curve."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from minigpt.checks import adapter
from minigpt.checks.adamw import AdamW
from minigpt.checks.batch_checks import DEBUG_BATCH_SIZE
from minigpt.checks.context import CheckContext, weights_finite
from minigpt.checks.control import CheckRun
from minigpt.checks.nonfinite_checks import localise_nonfinite
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.checks.watched import watch_settings
from minigpt.errors import MiniGPTError
from minigpt.logs.metrics import MetricPoint, MetricPoints, MetricsLog
from minigpt.logs.perplexity import perplexity, perplexity_text
from minigpt.model.checkpoint import LoadedCheckpoint, read_checkpoint
from minigpt.model.factory import builtin_class_of

if TYPE_CHECKING:
    from minigpt.logs.curve_rules import CurveDiagnosis

LOAD_BATCHES = 4  # batches of DEBUG_BATCH_SIZE windows checkpoint_load measures the loss on

# A healthy model memorises one fixed batch: its loss must end below this fraction of log(V).
# Far below the baseline, not merely below the initial loss: a loss computed on probabilities
# also creeps down, but it cannot fall under about log(V - 1 + e) - 1.
OVERFIT_THRESHOLD = 0.1
OVERFIT_LR = 3e-3
OVERFIT_POLL = 10  # steps between looks at the loss (each look is a device sync)
# stop once the training loss is below half the threshold: the eval-mode loss that decides the
# verdict is then far below it too (the debug config has dropout 0)
OVERFIT_EARLY_STOP = 0.5


@check(
    "single_batch_overfit",
    "training",
    "A debug-size model memorises one batch",
    depends=("forward_shapes", "batch_shift"),
    slow=True,
)
def single_batch_overfit(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    if ctx.options.skip_overfit:
        raise Outcome(Status.SKIP, "skipped (--skip-overfit)")
    cfg = ctx.debug_config()
    model = ctx.build_model(cfg).train()
    V = ctx.tokenizer.vocab_size
    T = int(adapter.config_lookup(cfg, "block_size") or 32)  # type: ignore[call-overload]
    x, y = ctx.batch(DEBUG_BATCH_SIZE, T, seed=ctx.options.seed + 11)
    lr = ctx.fault.learning_rate(OVERFIT_LR) if ctx.fault else OVERFIT_LR
    opt = AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    steps = ctx.options.overfit_steps
    threshold = OVERFIT_THRESHOLD * math.log(V)
    history = torch.empty(steps)
    nonfinite_step = None
    for step in range(steps):
        run.raise_if_cancelled()
        _, loss = adapter.call_with_loss(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        history[step] = loss.detach()
        if step % OVERFIT_POLL == OVERFIT_POLL - 1 or step == steps - 1:  # one host sync per poll
            run.progress((step + 1) / steps)
            if not torch.isfinite(history[: step + 1]).all():
                nonfinite_step = int((~torch.isfinite(history[: step + 1])).nonzero()[0])
                break
            if history[step].item() < OVERFIT_EARLY_STOP * threshold:
                break  # memorised with margin: the verdict is certain, the remaining steps would not change it
    baseline = math.log(V)
    hist = history[: step + 1].tolist()
    values = {
        "steps": step + 1,
        "learning_rate": lr,
        "initial_loss": hist[0],
        "baseline": baseline,
        "threshold": OVERFIT_THRESHOLD * baseline,
        "model_config": cfg,
        "loss_curve": hist[:: max(1, len(hist) // 50)],
    }
    if nonfinite_step is not None:
        where = localise_nonfinite(model.eval(), x, y)
        values.update(nonfinite_step=nonfinite_step, localisation=where)
        raise Outcome(
            Status.FAIL,
            f"loss became non-finite at overfit step {nonfinite_step} (lr {lr:g}); "
            f"first non-finite module: {where['first_module']}",
            values=values,
            causes=["learning rate too high", "no gradient clipping", "an overflow in forward"],
            fixes=["lower the learning rate", "clip gradients to norm 1.0"],
        )
    model.eval()
    # memorisation is judged on the logits, not on the model's own loss: a loss with label smoothing
    # or an auxiliary term has a floor above zero however well the batch is memorised
    with torch.no_grad():
        logits, own = adapter.call(model, x, y)
        final = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1)).item()
    values.update(final_loss=final, final_model_loss=own.item() if own is not None else None, min_loss=min(hist))
    if final < OVERFIT_THRESHOLD * baseline:
        return (
            f"memorised one batch: loss {hist[0]:.3f} at the start, cross-entropy of the logits {final:.4f} "
            f"after {step + 1} steps "
            f"(< {OVERFIT_THRESHOLD:g} x log(V) = {OVERFIT_THRESHOLD * baseline:.3f})"
        ), values
    causes, fixes = [], []
    second = hist[len(hist) // 2 :]
    rises = sum(b > a * 1.02 for a, b in zip(second, second[1:])) / max(1, len(second) - 1)
    softmax_floor = math.log(V - 1 + math.e) - 1  # the least a loss on probabilities can reach
    values.update(rising_step_fraction=rises, softmax_loss_floor=softmax_floor)
    if rises > 0.15 or max(hist[1:], default=0.0) > 1.2 * hist[0]:
        causes += [
            f"learning rate too high (lr {lr:g}): the loss jumped above its start or rises on {rises:.0%} of late steps"
        ]
        fixes += ["lower the learning rate"]
    elif (own_final := values["final_model_loss"] or final) > 0.6 * baseline and own_final >= softmax_floor - 0.25:
        causes += [
            f"the loss is computed on probabilities (softmax before F.cross_entropy): it cannot fall "
            f"below log(V - 1 + e) - 1 = {softmax_floor:.2f}",
            "most parameters frozen or disconnected from the loss",
        ]
        fixes += ["pass raw logits to F.cross_entropy; it applies log-softmax itself"]
    causes += [
        "dropout or noise active while memorising",
        "too few steps for this model (--overfit-steps)",
        "targets not aligned with inputs",
    ]
    raise Outcome(
        Status.FAIL,
        f"did not memorise one batch: loss {hist[0]:.3f} at the start, cross-entropy of the logits {final:.3f} "
        f"after {step + 1} steps (needs < {OVERFIT_THRESHOLD * baseline:.3f})",
        values=values,
        causes=causes,
        fixes=fixes + ["run gradients and optimizer_update"],
    )


SEVERITY = {"pass": Status.PASS, "warn": Status.WARN, "fail": Status.FAIL, "skip": Status.SKIP}


@check("training_curve", "training", "The logged loss curve has a healthy shape")
def training_curve(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    from minigpt.logs.curve import SHAPE_SEVERITY
    from minigpt.logs.curve_rules import diagnose
    from minigpt.logs.sources import read_run_metrics

    path = ctx.inputs.metrics
    if path.exists():  # a FIFO or device is named by read_metrics, never opened
        log = read_run_metrics(path)
        if not log.points and log.bad_lines:  # not JSONL: nanoGPT's saved stdout is read as it is
            log = _nanogpt_stdout(path) or log
    else:
        raise Outcome(Status.SKIP, f"no metrics log at {path} (train first, or pass --workspace/--metrics)")
    baseline = unigram = None
    try:
        baseline = math.log(ctx.tokenizer.vocab_size)
        unigram = _unigram_entropy(ctx, ctx.tokenizer.vocab_size)
    except MiniGPTError:
        pass  # tokenizer_roundtrip and the data checks report it; the curve is judged without those lines
    settings = watch_settings(ctx.ws, ctx.run_settings())  # the watched loop's warmup and clipping, measured
    diagnosis = diagnose(log.points, baseline=baseline, unigram_entropy=unigram, settings=settings)
    records = len(log.points) if log.records is None else log.records
    values = {"shape": diagnosis.shape, "points": records, "bad_lines": log.bad_lines, **diagnosis.values}
    values["judged_points"] = len(log.points)  # one per step; fewer than the records when a long log was downsampled
    for note in log.notes:  # which run and tags of a TensorBoard folder were read; nanoGPT's stdout
        diagnosis.summary += f"; {note}"
    values["tensorboard_tags"] = getattr(log, "tags", None)
    _explained_by_earlier(ctx, diagnosis, values)
    status = SEVERITY[SHAPE_SEVERITY.get(diagnosis.shape, "warn")]
    if status is Status.PASS:
        return _curve_summary(diagnosis), values
    raise Outcome(status, _curve_summary(diagnosis), values=values, causes=diagnosis.causes, fixes=diagnosis.fixes)


# the checks whose failure explains a shape, by shape: a loss too low for text comes from targets
# the model can see (not shifted, a mask that shows t+1) or val text that is in the train text
EXPLAINED_BY = {"too_good": ("loop_targets_shifted", "causal_independence", "split_overlap")}


def _explained_by_earlier(ctx: CheckContext, diagnosis: CurveDiagnosis, values: dict) -> None:
    """Where a check of this run failed in a way that explains the curve's shape, the verdict names
    it first as the measured cause, and drops the guesses it settles."""
    failed = [
        ctx.earlier[cid]
        for cid in EXPLAINED_BY.get(diagnosis.shape, ())
        if cid in ctx.earlier and ctx.earlier[cid].status is Status.FAIL
    ]
    if not failed:
        return
    values["explained_by"] = [r.id for r in failed]
    diagnosis.causes = [f"measured: {r.id} failed in this run: {r.summary}" for r in failed]
    diagnosis.summary += f"; explained by {', '.join(r.id for r in failed)} (failed above)"


@check("checkpoint_load", "checkpoint", "The checkpoint loads strictly and is trained", depends=("token_range",))
def checkpoint_load(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    aside = _set_aside_note(ctx)
    also = f"; {aside}" if aside else ""
    if not ctx.has_checkpoint:
        why = (
            "--checkpoint none"
            if ctx.inputs.fresh_model_requested
            else f"no checkpoint at {ctx.inputs.checkpoint_default}"
        )
        raise Outcome(Status.SKIP, f"{why} (checks ran on a fresh model){also}")
    loaded = ctx.checkpoint  # CheckpointError -> this check fails with the typed message
    model = loaded.model.eval()
    params = [p.detach() for p in model.parameters()]
    finite = weights_finite(model)
    V = adapter.config_value(model, "vocab_size")
    T = adapter.config_value(model, "block_size")
    baseline = math.log(V)
    split = "val" if "val" in ctx.splits else "train"
    with torch.no_grad():
        losses = [
            adapter.call_with_loss(model, *ctx.batch(DEBUG_BATCH_SIZE, T, split=split, seed=s))[1]
            for s in range(LOAD_BATCHES)
        ]
    loss = torch.stack(losses).mean().item()
    # its own few batches: a loss that differs from the trainer's figure must say why
    measured = f"on {LOAD_BATCHES} batches of {DEBUG_BATCH_SIZE}x{T} ({LOAD_BATCHES * DEBUG_BATCH_SIZE * T:,} tokens)"
    values = {
        "path": loaded.path,
        "step": loaded.step,
        "best_val_loss": loaded.best_val_loss,
        "notices": loaded.notices,
        "weights_finite": finite,
        "loss": loss,
        "split": split,
        "baseline": baseline,
        "perplexity": perplexity(loss),
        "measured_tokens": LOAD_BATCHES * DEBUG_BATCH_SIZE * T,
        "config": loaded.config,
        "parameters": sum(p.numel() for p in params),
        "set_aside": str(ctx.inputs.set_aside) if ctx.inputs.set_aside else None,
    }
    if not finite:
        raise Outcome(
            Status.FAIL,
            f"checkpoint holds non-finite weights{also}",
            values=values,
            causes=["saved after the loss diverged"],
            fixes=["use an earlier checkpoint; lower the learning rate"],
        )
    if loaded.fingerprint_mismatch:
        values["fingerprint_mismatch"] = loaded.fingerprint_mismatch
    if not math.isfinite(loss) or loss > 0.85 * baseline:
        raise Outcome(
            Status.FAIL,
            f"{split} loss {loss:.3f} is not clearly below log(V) = {baseline:.3f}: "
            f"the weights do not predict this data{also}",
            values=values,
            causes=[
                "the weights were not loaded (a fresh model was evaluated)",
                "the tokenizer does not match the checkpoint",
                "the checkpoint was saved before any training",
            ]
            + ([loaded.fingerprint_mismatch] if loaded.fingerprint_mismatch else []),
            fixes=["check tokenizer_fingerprint", "load with strict=True and check the step"],
        )
    notes = "; ".join(loaded.notices)
    judged = f"{ctx.hf_weights}: " if ctx.hf_weights is not None else ""  # the hf:FOLDER's own weights
    return (
        f"{judged}{step_words(loaded.step)}, {split} loss {loss:.3f} (perplexity {perplexity_text(loss)}) "
        f"{measured} vs log(V) {baseline:.3f}" + _trainer_loss_note(loaded) + (f"; {notes}" if notes else "") + also
    ), values


def _trainer_loss_note(loaded: LoadedCheckpoint) -> str:
    """The validation loss the trainer stored with the weights, and the batches it came from when
    the checkpoint says: the two figures are measured on different windows, so they differ."""
    if loaded.best_val_loss is None:
        return ""
    raw = loaded.raw
    if isinstance(raw.get("train_config"), dict):  # minigpt train: eval_batches x batch_size windows
        settings, who, batches_key = raw["train_config"], "the trainer's", "eval_batches"
    elif isinstance(raw.get("imported_from"), dict) and isinstance(raw["imported_from"].get("config"), dict):
        settings, who, batches_key = raw["imported_from"]["config"], "nanoGPT's", "eval_iters"  # estimate_loss
    else:
        settings, who, batches_key = {}, "the trainer's", ""
    counts = [settings.get(k) for k in (batches_key, "batch_size", "block_size")]
    ints = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    where = (
        f" ({ints[0]} batches of {ints[1]}x{ints[2]}, {ints[0] * ints[1] * ints[2]:,} tokens)"
        if len(ints) == len(counts) == 3
        else ""
    )
    return f"; {who} best_val_loss {loaded.best_val_loss:.4f}, stored in the checkpoint, came from other batches{where}"


def step_words(step: int | None) -> str:
    """The checkpoint's training step in words; weights saved without one (a save_pretrained folder) say so."""
    return "no training step saved with the weights" if step is None else f"step {step}"


def _set_aside_note(ctx: CheckContext) -> str | None:
    """Why the workspace's checkpoint was not judged, when `--model hf:FOLDER` brings its own weights
    (None otherwise). The workspace's file is read to name what it holds."""
    path = ctx.inputs.set_aside
    if path is None:
        return None
    spec = ctx.options.model_spec
    own = f"--model {spec} brings its own weights"
    try:
        raw = read_checkpoint(path)
    except MiniGPTError as exc:
        return f"the workspace's {path} left aside (unreadable: {exc.message[:120]}): {own}"
    written = builtin_class_of(raw.get("config"))
    if written is None:
        return f"the workspace's {path} left aside: {own} (--checkpoint {path} judges it)"
    step = raw.get("step")
    at = f", step {step}" if isinstance(step, int) and not isinstance(step, bool) else ""
    built = ctx.model_spec.model_cls.__name__ if ctx.model_spec is not None else "model"
    return (
        f"the workspace's {path} ({written}{at}) left aside: another architecture than the {built} --model {spec} "
        "builds (minigpt check without --model judges it)"
    )


def _nanogpt_stdout(path: Path) -> MetricsLog | None:
    """nanoGPT's stdout (`python train.py | tee train.log`) as a metrics log, with a note naming the
    import that writes it as logs/metrics.jsonl; None when the file holds no nanoGPT line."""
    from minigpt.importers.nanogpt_log import read_nanogpt_log

    try:
        nano = read_nanogpt_log(path)
    except MiniGPTError:
        return None
    points = MetricPoints(
        MetricPoint(r["step"], train_loss=_float(r.get("train_loss")), val_loss=_float(r.get("val_loss")))
        for r in nano.records
    )
    log = MetricsLog(str(path), points)
    log.notes.append(
        f"read as nanoGPT's stdout ({nano.iter_lines} iter and {nano.eval_lines} eval lines); "
        "`minigpt import nanogpt --out-dir OUT --data-dir DATA --log FILE` writes it as logs/metrics.jsonl "
        "beside the checkpoint"
    )
    return log


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float | str) else None


def _unigram_entropy(ctx: CheckContext, vocab_size: int) -> float:
    """The loss of predicting each token by its frequency in the training split alone (what the output
    bias learns first): how far a curve got is measured from log V towards it."""
    counts = torch.bincount(ctx.splits["train"].long().clamp(0, vocab_size - 1), minlength=vocab_size).double()
    probs = counts[counts > 0] / counts.sum()
    return float(-(probs * probs.log()).sum())


def _curve_summary(diagnosis: CurveDiagnosis) -> str:
    prefix = f"{diagnosis.shape}:"
    return diagnosis.summary if diagnosis.summary.startswith(prefix) else f"{prefix} {diagnosis.summary}"
