"""The rules that name a loss curve's shape, in the order `diagnose` tries them. Each rule reads the
series `curve_series.derive` computed once and returns a diagnosis or None; what to say about each shape is in
`curve_advice`. The thresholds live in `minigpt.logs.curve` (MIN_POINTS and the ceiling in `curve_series`).

Rules, in order (`RULES`; shape -> status in SHAPE_SEVERITY):
1. diverged (`_rule_nonfinite`): a non-finite train or val loss, or a non-finite gradient norm on
   the last line (the trainer stops there). Reports the first such step and the LR at it.
2. too_short: fewer than MIN_POINTS (5) finite train losses.
3. scaled_loss: the logged train loss is off by a factor. Train / val (train: the median of the 3 points
   nearest each evaluation) outside [1 / SCALE_FAR, SCALE_FAR] (1.8) at every evaluation, from the
   first on, with a relative spread under SCALE_STEADY (15%), over at least SCALE_MIN_EVALS (3): dropout
   keeps it near 1, overfitting opens the gap slowly. Or, with no evaluation saying otherwise, a first
   train loss at step 0 or 1 (a fresh model, which scores about log V) below log V / SCALE_FAR. Names
   the integer k the ratio is 1/k (a loss divided by the accumulation count) or k (summed) of, within
   SCALE_WHOLE (12%).
4. unstable (`_rule_unstable`), a finite loss that went the wrong way: it ended above the ceiling; or
   the smoothed loss went above max(FAR_RATIO (2) x baseline, ceiling) (no initialisation is that bad:
   it blew up, maybe before the first logged step), or above NO_BASELINE_CEILING without a baseline; or
   the smoothed loss rose above the ceiling from a lower level; or end > start + max(RISE_ABS 0.05,
   RISE_REL 5%); or the train trend rises by more than RISING_REL (2%) and RISING_SE (4) standard
   errors; or it stayed above start + max(SURGE_ABS 0.5, SURGE_REL 25%) for max(3, 10% of the points)
   in a row.
5. flat: never learned and never rose (no unstable reason, checked again): end within
   FLAT_BASELINE_MARGIN (0.05) of the baseline or above it; or a fall of less than FLAT_REL_DROP (2%)
   from a start at most FLAT_START_MARGIN (0.5 nats) below the baseline (further below, it learned
   before the first logged step: a plateau).
6. oscillating: over the second half of the run (at least OSC_MIN_EVALS, 4, evaluations) neither loss
   fell (a line's fall over 2 standard errors and PLATEAU_REL), and the val loss, an average over many
   batches, swings about its line by at least OSC_SWING_REL (1%) of its level and OSC_NOISE_SHARE (0.3)
   of the train loss's swing: the weights move, not only the batches. Learning rate too high.
7. overfitting: at least 3 finite val losses, the best before the last; the last val (with a measured
   val noise, the median of the last 3) above the best smoothed val level by max(OVERFIT_MARGIN_ABS
   0.02, OVERFIT_MARGIN_REL 2%, OVERFIT_NOISE 4 x val noise); while train fell from the best-val step on
   (a line's fall over OVERFIT_TRAIN_DROP, 0.5%, and 2 standard errors). Reports the gap val - train.
8. spikes: blocks of clamp(n // 10, 3, 50) points; a point more than max(SPIKE_MIN_JUMP 0.5 nats,
   SPIKE_MADS 8 x scale) above the previous block's median (scale = median MAD of up to 4 blocks
   before) is a spike; the first block is not checked; consecutive spike points are one spike,
   reported at its peak. Drops are never spikes.
9. barely_learned: the end is less than BARELY_FRACTION (50%) of the way from log V to the unigram
   entropy (without it: less than BARELY_REL, 10%, below log V), and the loss did not stall in the
   first STALL_EARLY (20%) of the run (that is the plateau's "learning rate too high"). Learning rate
   too low; the LR probe finds a better one.
10. plateau: a fall of less than FLAT_REL_DROP from a start far below the baseline (stalled before the
   first log line); or a level trend (replayed: within PLATEAU_REL, 1%, known to 1%) whose level was
   reached within the first PLATEAU_EARLY (50%) of the run. Reached later: converged (healthy).
11. still_improving: the trend, replayed, counts as improving (its fall cleared IMPROVING_REL, 3%, by
   3 standard errors and has not dropped below 3% since): train longer.
12. healthy: none of the above (converged; still falling slowly after a fall under SLOW_WHOLE_FALL, 20%,
   in all, never "converged"; or too noisy to tell: the summary says which).

The real curves in tests/fixtures/curves (tools/make_curve_fixtures.py) give every rule a run it fires
on and one it does not.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from minigpt.logs.curve import (
    FAR_RATIO,
    FLAT_BASELINE_MARGIN,
    FLAT_REL_DROP,
    FLAT_START_MARGIN,
    OSC_MIN_EVALS,
    OSC_NOISE_SHARE,
    OSC_SWING_REL,
    OVERFIT_MARGIN_ABS,
    OVERFIT_MARGIN_REL,
    OVERFIT_NOISE,
    OVERFIT_TRAIN_DROP,
    PLATEAU_EARLY,
    RISE_ABS,
    RISE_REL,
    RISING_REL,
    RISING_SE,
    SPIKE_MADS,
    SPIKE_MIN_BLOCK,
    SPIKE_MIN_JUMP,
    SPIKE_SCALE_BLOCKS,
    STALL_EARLY,
    SURGE_ABS,
    SURGE_REL,
    CurveDiagnosis,
    fmt_loss,
)
from minigpt.logs.curve_advice import RunSettings, diagnosis, first_words, fit_to_settings, last_words
from minigpt.logs.curve_levels import rule_barely_learned, rule_scaled_loss
from minigpt.logs.curve_series import (
    CEILING_MARGIN,
    MIN_POINTS,
    NO_BASELINE_CEILING,
    Curve,
    Rule,
    blocks,
    derive,
    logged_lr_at,
    median,
    plateau_start,
    smooth3,
)
from minigpt.logs.curve_trend import IMPROVING_REL, IMPROVING_SE, PLATEAU_REL, TAIL, TREND_NOISY, line_fit
from minigpt.logs.metrics import MetricPoint


def _fmt_steps(steps: list[int], limit: int = 5) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f" and {len(steps) - limit} more" if len(steps) > limit else "")


# -- derived series -------------------------------------------------------------------------


def _rule_nonfinite(c: Curve) -> CurveDiagnosis | None:
    train_vals = [p.train_loss for p in c.points if p.train_loss is not None]
    train_vals += [p.val_loss for p in c.points if p.val_loss is not None]
    last = c.points[-1] if c.points else None
    if math.isfinite(sum(train_vals)) and (last is None or last.grad_norm is None or math.isfinite(last.grad_norm)):
        return None  # the common case, tested in C; the loop below finds the first bad line
    for i, p in enumerate(c.points):
        bad = [
            name
            for name in ("train_loss", "val_loss")
            if getattr(p, name) is not None and not math.isfinite(getattr(p, name))
        ]
        if not bad and i == len(c.points) - 1 and p.grad_norm is not None and not math.isfinite(p.grad_norm):
            bad = ["grad_norm"]
        if bad:
            lr = logged_lr_at(c.points, p.step)
            c.values.update(first_nonfinite_step=p.step, nonfinite_what=bad[0], lr_at_instability=lr)
            value = getattr(p, bad[0])
            lr_text = f" (learning rate {lr:.3g})" if lr is not None else ""
            loss = f"; train loss {fmt_loss(p.train_loss)} there" if bad[0] == "grad_norm" and p.train_loss else ""
            d = diagnosis(
                "diverged", f"diverged: {bad[0].replace('_', ' ')} became {value} at step {p.step}{lr_text}{loss}", c
            )
            return _blame_raise(d, c, p.step)
    return None


def _rule_too_short(c: Curve) -> CurveDiagnosis | None:
    n = len(c.ys)
    if n >= MIN_POINTS:
        return None
    return diagnosis(
        "too_short", f"too_short: {n} train loss value(s); need at least {MIN_POINTS} to judge the curve", c
    )


def _first_raw_above(c: Curve, i: int, level: float) -> int:
    """The first logged point above `level` in the window the smoothed value at `i` covers: a
    running median of 3 can cross at the point before the jump (4.8 at step 0, 50 at step 10 gives
    a smoothed 27 at step 0), and the verdict must quote the step the loss itself got there."""
    n = len(c.ys)
    return next((j for j in range(max(0, i - 1), min(n, i + 2)) if c.ys[j] > level), i)


def _unstable_reason(c: Curve) -> tuple[str, str, int] | None:
    """(reason, words, index where it went wrong), or None when the loss never went the wrong way."""
    ys, sm, steps, n = c.ys, c.smooth, c.steps, len(c.ys)
    guess = (
        f"the uniform guess (log V {c.baseline:.3f} + {CEILING_MARGIN})"
        if c.baseline is not None
        else f"{NO_BASELINE_CEILING:g} nats (no real vocabulary starts that high)"
    )
    peak = max(range(n), key=ys.__getitem__)
    if c.end > c.ceiling:
        first_up = next(i for i in range(n) if ys[i] > c.ceiling)  # the end is above: some point is
        return (
            "above_ceiling",
            f"ended above {guess}; first above it at step {steps[first_up]}, "
            f"peak {fmt_loss(ys[peak])} at step {steps[peak]}",
            first_up,
        )
    far = max(FAR_RATIO * c.baseline, c.ceiling) if c.baseline is not None else NO_BASELINE_CEILING
    first_far = next((i for i in range(n) if sm[i] > far), None)
    if first_far is not None:
        first_far = _first_raw_above(c, first_far, far)
        return (
            "far_above_guess",
            f"went above {fmt_loss(far)} (far worse than a uniform guess) at step {steps[first_far]}; "
            f"peak {fmt_loss(ys[peak])} at step {steps[peak]}",
            first_far,
        )
    low = sm[0]
    for i in range(1, n):
        low = min(low, sm[i - 1])
        if i not in c.excused and sm[i] > c.ceiling and sm[i] > low + max(RISE_ABS, RISE_REL * abs(low)):
            i = _first_raw_above(c, i, c.ceiling)
            top = max(range(i, n), key=ys.__getitem__)
            return (
                "rose_above_ceiling",
                f"rose from {fmt_loss(low)} above {guess} at step {steps[i]} "
                f"(peak {fmt_loss(ys[top])} at step {steps[top]})",
                i,
            )
    if c.end > c.start + max(RISE_ABS, RISE_REL * abs(c.start)):
        return "ended_above_start", "ended above where it started", n - 1
    fall, se = c.train_trend
    if -fall > RISING_REL and -fall > RISING_SE * se:
        return "rising", f"is still rising at the end ({100 * -fall:+.1f}% over the last {TAIL:.0%})", n - 1
    limit = c.start + max(SURGE_ABS, SURGE_REL * abs(c.start))
    best, run_from = (0, 0), None  # the longest run of consecutive points above the limit: [from, to)
    for i in range(n + 1):
        up = i < n and sm[i] > limit and i not in c.excused
        if up and run_from is None:
            run_from = i
        elif not up and run_from is not None:
            best, run_from = max(best, (run_from, i), key=lambda r: r[1] - r[0]), None
    if best[1] - best[0] >= max(3, n // 10):
        top = max(range(*best), key=ys.__getitem__)
        return (
            "surge",
            f"rose to {fmt_loss(ys[top])} at step {steps[top]} and stayed above {fmt_loss(limit)} "
            f"from step {steps[best[0]]} to {steps[best[1] - 1]}",
            best[0],
        )
    return None


def _rule_unstable(c: Curve) -> CurveDiagnosis | None:
    found = _unstable_reason(c)
    if found is None:
        return None
    reason, words, index = found
    lr = logged_lr_at(c.points, c.steps[index])
    c.values.update(unstable_reason=reason, lr_at_instability=lr)
    d = diagnosis("unstable", f"unstable: train loss {words}; {first_words(c)}, {last_words(c)}", c)
    peak_lr = c.values["peak_lr"]
    if peak_lr:
        d.fixes[0] = f"lower the learning rate 3-10x (peak {peak_lr:.3g}: try {peak_lr / 10:.2g} to {peak_lr / 3:.2g})"
    return _blame_raise(d, c, c.steps[index])


def _blame_raise(d: CurveDiagnosis, c: Curve, bad_step: int) -> CurveDiagnosis:
    """It went wrong at or after a jump up of the LR (a resume with a higher --lr): that jump is
    the first suspect, named with the rate the run had before it."""
    raised = [(i, before, after) for i, before, after in c.raises if c.steps[i] <= bad_step]
    if raised:
        i, before, after = raised[-1]
        d.causes.insert(
            0,
            f"the learning rate was raised from {before:.3g} to {after:.3g} at step {c.steps[i]} (a resume with --lr?)",
        )
        d.fixes.insert(
            0, f"resume from the checkpoint before step {c.steps[i]} with the learning rate it had ({before:.3g})"
        )
    return d


def _rule_flat(c: Curve) -> CurveDiagnosis | None:
    if _unstable_reason(c) is not None:
        return None  # a loss that rose is never flat, whatever the order of the rules
    drop = c.values["relative_drop"]
    span = f"{c.steps[-1] - c.steps[0]} steps"
    if c.baseline is not None and c.end >= c.baseline - FLAT_BASELINE_MARGIN:
        summary = f"flat: train loss is no better than a uniform guess (log V {c.baseline:.3f}) after {span}"
    elif drop < FLAT_REL_DROP and (c.baseline is None or c.start >= c.baseline - FLAT_START_MARGIN):
        summary = f"flat: train loss stayed near where it started over {span} ({100 * drop:.1f}% lower)"
    else:
        return None
    d = diagnosis("flat", f"{summary}; {first_words(c)}, {last_words(c)}", c)
    if {p.lr for p in c.points if p.lr is not None} == {0.0}:
        d.causes.insert(0, "the learning rate is 0 for the whole run")
    return d


def _rule_oscillating(c: Curve) -> CurveDiagnosis | None:
    """Over the second half neither loss made progress, and the val loss, an average over many
    batches, swings by a sizeable share of the train loss's swing: the weights move, not only the
    batches (a stable model's val readings differ by sampling noise alone)."""
    n, steps = len(c.steps), c.steps
    start = steps[0] + 0.5 * (steps[-1] - steps[0])
    if c.cuts:  # after a cut of the LR the loss settles at a new level first
        start = max(start, steps[min(n - 1, c.cuts[-1][0] + max(3, n // 20))])
    vals = [(float(s), y) for s, y in c.vals if s >= start]
    window = [i for i in range(n) if steps[i] >= start and i not in c.excused]
    if len(vals) < OSC_MIN_EVALS or len(window) < 2 * OSC_MIN_EVALS:
        return None
    val = line_fit([s for s, _ in vals], [y for _, y in vals])
    train = line_fit([steps[i] for i in window], [c.ys[i] for i in window])
    c.values.update(swing_val=val.spread, swing_train=train.spread, swing_from_step=steps[window[0]])
    if any(f.fall > 2 * f.se and f.fall > PLATEAU_REL for f in (val, train)):
        return None  # it still makes progress
    if val.spread < OSC_SWING_REL * val.level or val.spread < OSC_NOISE_SHARE * train.spread or not train.spread:
        return None
    d = diagnosis(
        "oscillating",
        f"oscillating: val loss swings +-{val.spread:.3f} ({val.spread / val.level:.1%}) about {fmt_loss(val.level)} "
        f"from step {steps[window[0]]} ({len(vals)} evaluations), {val.spread / train.spread:.2f} x the train loss's "
        f"+-{train.spread:.3f}, without progress (val {100 * val.fall:+.1f}% +- {100 * val.se:.1f}%, train "
        f"{100 * train.fall:+.1f}% +- {100 * train.se:.1f}%); {last_words(c)}",
        c,
    )
    peak_lr = c.values["peak_lr"]
    if peak_lr:
        d.fixes[0] = f"lower the learning rate 3x (peak {peak_lr:.3g}: try {peak_lr / 3:.2g}) and compare the curves"
    return d


def _rule_overfitting(c: Curve) -> CurveDiagnosis | None:
    """Val rose above its best level by more than its own noise, while train fell since the best."""
    v, vals = c.values, c.vals
    if len(vals) < 3 or vals[-1][0] == v["best_val_step"]:
        return None
    best_val, best_step, last_val = v["best_val_loss"], v["best_val_step"], v["last_val_loss"]
    ys = [val for _, val in vals]
    level = min(smooth3(ys)[:-1])  # the best level, not one lucky reading
    noise = c.val_noise
    # with its noise measured, the end is the median of the last 3 readings: one high reading is no rise
    end, end_words = (last_val, "the last reading") if noise is None else (median(ys[-3:]), "the median of the last 3")
    margin = max(OVERFIT_MARGIN_ABS, OVERFIT_MARGIN_REL * abs(level), OVERFIT_NOISE * (noise or 0.0))
    v.update(overfit_rise=end - level, overfit_margin=margin)
    if end - level < margin:
        return None
    n = len(c.steps)
    first = min(bisect.bisect_left(c.steps, best_step), n - 4)  # at least 4 train points
    window = [i for i in range(max(0, first), n) if i not in c.excused]
    fall = line_fit([c.steps[i] for i in window], [c.ys[i] for i in window])
    v.update(train_fall_since_best=fall.fall, train_fall_since_best_se=fall.se)
    if not (fall.fall > OVERFIT_TRAIN_DROP and fall.fall > 2 * fall.se):
        return None  # val rose but train did not fall: not the model learning its training data
    noise_text = "" if noise is None else f", {OVERFIT_NOISE:g} x val noise {noise:.3f}"
    return diagnosis(
        "overfitting",
        f"overfitting: val loss rose from {fmt_loss(best_val)} (best, step {best_step}) to {fmt_loss(last_val)} "
        f"(last); {end_words}, {fmt_loss(end)}, is {end - level:.3f} above its best level {fmt_loss(level)} "
        f"(margin {margin:.3f}: max({OVERFIT_MARGIN_ABS:g}, {OVERFIT_MARGIN_REL:.0%}{noise_text})), while train fell "
        f"{fall.fall * abs(fall.level):.3f} (+- {fall.se * abs(fall.level):.3f}, a line through the "
        f"{len(window)} points from step {c.steps[window[0]]}), to {last_words(c)}; "
        f"gap val - train {last_val - c.end:.3f}",
        c,
    )


def _spike_indices(ys: list[float]) -> list[int]:
    """Indices more than max(SPIKE_MIN_JUMP, SPIKE_MADS * scale) above the previous block's median,
    scale = the median of the MADs of the blocks before (one 50-point MAD is too noisy alone)."""
    bounds = blocks(len(ys), max(SPIKE_MIN_BLOCK, min(50, len(ys) // 10)))
    meds = [median(ys[a:z]) for a, z in bounds]
    mads: dict[int, float] = {}

    def mad(b: int) -> float:
        if b not in mads:
            a, z = bounds[b]
            mads[b] = median([abs(y - meds[b]) for y in ys[a:z]])
        return mads[b]

    out: list[int] = []
    for b in range(1, len(bounds)):
        a, z = bounds[b]
        if max(ys[a:z]) <= meds[b - 1] + SPIKE_MIN_JUMP:
            continue  # the common case: no MAD needed
        scale = median([mad(k) for k in range(max(0, b - SPIKE_SCALE_BLOCKS), b)])
        limit = meds[b - 1] + max(SPIKE_MIN_JUMP, SPIKE_MADS * scale)
        out.extend(i for i in range(a, z) if ys[i] > limit)
    return out


def _rule_spikes(c: Curve) -> CurveDiagnosis | None:
    kept = [i for i in range(len(c.ys)) if i not in c.excused]
    spike_idx = [kept[j] for j in _spike_indices([c.ys[i] for i in kept])]
    if not spike_idx:
        return None
    clusters: list[list[int]] = [[spike_idx[0]]]
    for i in spike_idx[1:]:
        (clusters[-1].append(i) if i == clusters[-1][-1] + 1 else clusters.append([i]))
    spike_steps = [c.steps[max(cl, key=c.ys.__getitem__)] for cl in clusters]
    lr = logged_lr_at(c.points, spike_steps[0])
    c.values.update(spike_steps=spike_steps, lr_at_instability=lr)
    lr_text = f"; learning rate {lr:.3g} at the first" if lr is not None else ""
    top = max(spike_idx, key=c.ys.__getitem__)
    d = diagnosis(
        "spikes",
        f"spikes: {len(spike_steps)} loss spike(s) at step(s) {_fmt_steps(spike_steps)} "
        f"(highest {fmt_loss(c.ys[top])}){lr_text}; {last_words(c)}",
        c,
    )
    return _blame_raise(d, c, spike_steps[0])


def _rule_plateau(c: Curve) -> CurveDiagnosis | None:
    fall, se = c.trend
    early_lr_too_high = False
    if c.values["relative_drop"] < FLAT_REL_DROP:  # only reached when it started far below log V
        since, words = c.steps[0], "fell below the uniform guess before the first logged step, then stayed level"
        early_lr_too_high = True
    elif c.level:  # the trend within PLATEAU_REL, replayed with its dead band
        since = plateau_start(c)
        if since - c.steps[0] > PLATEAU_EARLY * (c.steps[-1] - c.steps[0]):
            return None  # flattened late: converged (healthy)
        words = f"has stayed level since step {since} ({100 * fall:+.1f}% over the last {TAIL:.0%}, {c.trend_series})"
        early_lr_too_high = since - c.steps[0] <= STALL_EARLY * (c.steps[-1] - c.steps[0])
    else:
        return None
    lr = logged_lr_at(c.points, since)
    c.values.update(plateau_start_step=since, lr_at_plateau_start=lr)
    d = diagnosis("plateau", f"plateau: train loss {words}; {last_words(c)}", c)
    if early_lr_too_high:
        d.causes.insert(0, "learning rate too high: the loss stalls early at a noisy level a lower rate gets below")
        d.fixes.insert(0, "try a 3x lower learning rate and compare the curves")
    return d


def _rule_still_improving(c: Curve) -> CurveDiagnosis | None:
    """The trend replayed over the log with its dead band (`curve_trend.TrendHistory.improving`) still
    counts as improving: a fall that wanders about IMPROVING_REL as a run levels off changes this once."""
    if not c.improving:
        return None
    fall, se = c.trend
    return diagnosis(
        "still_improving",
        f"still_improving: {c.trend_series} loss fell {100 * fall:.1f}% (+- {100 * se:.1f}%) over the last "
        f"{TAIL:.0%} of the run; train longer; {first_words(c)}, {last_words(c)}",
        c,
    )


SLOW_WHOLE_FALL = 0.2  # a run whose loss fell less than this in all and still falls is not "converged"


def _whole_fall(c: Curve) -> float:
    """How far the train loss fell over the whole run, relative to its start."""
    return (c.start - c.end) / c.start if c.start and c.start > 0 else 0.0


def _rule_healthy(c: Curve) -> CurveDiagnosis:
    fall, se = c.trend
    gap = "" if c.values["last_val_loss"] is None else f", last val {fmt_loss(c.values['last_val_loss'])}"
    if fall > IMPROVING_REL and fall > 2 * se:  # not past the dead band still_improving needs
        trend = (
            f"levelling off ({100 * fall:+.1f}% +- {100 * se:.1f}% over the last {TAIL:.0%}, {c.trend_series}; "
            f"still improving needs {100 * IMPROVING_REL:.0f}% + {IMPROVING_SE:g} standard errors)"
        )
    elif fall > 2 * se and _whole_fall(c) < SLOW_WHOLE_FALL:  # still falling, having learned little: not level
        trend = (
            f"still falling slowly ({100 * fall:+.1f}% +- {100 * se:.1f}% over the last {TAIL:.0%}, "
            f"{c.trend_series}; still improving needs {100 * IMPROVING_REL:.0f}%)"
        )
        if c.baseline is None:
            trend += "; how much it learned cannot be judged: log V unknown (no vocabulary size)"
    elif se <= TREND_NOISY or fall > 2 * se:
        trend = f"converged ({100 * fall:+.1f}% over the last {TAIL:.0%}, {c.trend_series})"
    elif not math.isfinite(se):
        trend = "too few points to tell whether it still improves"
    else:
        trend = f"too noisy to tell whether it still improves ({100 * fall:+.1f}% +- {100 * se:.1f}%)"
    return diagnosis("healthy", f"healthy: train loss {first_words(c)} -> {last_words(c)}{gap}; {trend}", c)


RULES: tuple[tuple[str, Rule], ...] = (
    ("nonfinite", _rule_nonfinite),
    ("too_short", _rule_too_short),
    ("scaled_loss", rule_scaled_loss),
    ("unstable", _rule_unstable),
    ("flat", _rule_flat),
    ("oscillating", _rule_oscillating),
    ("overfitting", _rule_overfitting),
    ("spikes", _rule_spikes),
    ("barely_learned", rule_barely_learned),
    ("plateau", _rule_plateau),
    ("still_improving", _rule_still_improving),
    ("healthy", _rule_healthy),
)


def diagnose(
    points: Iterable[MetricPoint],
    *,
    baseline: float | None = None,
    unigram_entropy: float | None = None,
    settings: RunSettings | None = None,
) -> CurveDiagnosis:
    """Name the shape of a training curve: the first rule of RULES that matches (see the module docstring).
    `baseline` is log V; `unigram_entropy` (of the training tokens, when known) measures how much was learned;
    `settings` (the run's checkpoint's training settings) keep the advice to what the run does not do yet.

    `values` holds every key of VALUE_KEYS, None where a rule did not get that far; losses are over
    finite values, start/end_train_loss are medians of the first/last `edge_points` train losses,
    `*_perplexity` = e**loss of the end train and last val loss, generalisation_gap = last val - end train."""
    c = derive(points, baseline, unigram_entropy)
    for name, rule in RULES:
        d = rule(c)
        if d is not None:
            c.values["rule"] = name
            if d.shape not in ("diverged", "too_short") and c.notes:
                d.summary += "; " + "; ".join(c.notes)
            if settings is not None:
                fit_to_settings(d, settings)
            return d
    raise AssertionError("the healthy rule always matches")
