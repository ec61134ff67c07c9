"""The rules that name a loss curve's shape, in the order `diagnose` tries them. Each rule reads the
series `curve_series.derive` computed once and returns a diagnosis or None; what to say about each shape is in
`curve_advice`. The thresholds live in `minigpt.logs.curve` (MIN_POINTS and the ceiling in `curve_series`).

Rules, in order (`RULES`; shape -> status in SHAPE_SEVERITY):
1. diverged (`curve_instability.rule_nonfinite`): a non-finite train or val loss, or a non-finite
   gradient norm on the last line (the trainer stops there). Reports the first such step and the LR
   at it.
2. too_short: fewer than MIN_POINTS (5) finite train losses.
3. scaled_loss: the logged train loss is off by a factor. Train / val (train: the median of the 3 points
   nearest each evaluation) outside [1 / SCALE_FAR, SCALE_FAR] (1.8) at every evaluation, from the
   first on, with a relative spread under SCALE_STEADY (15%), over at least SCALE_MIN_EVALS (3): dropout
   keeps it near 1, overfitting opens the gap slowly. Or, with no evaluation saying otherwise, a first
   train loss at step 0 or 1 (a fresh model, which scores about log V) below log V / SCALE_FAR. Names
   the integer k the ratio is 1/k (a loss divided by the accumulation count) or k (summed) of, within
   SCALE_WHOLE (12%).
3b. too_good (`curve_levels.rule_too_good`): the last val loss (the train loss's end without an
   evaluation) below TOO_GOOD_UNIGRAM (10%) of the unigram entropy, or TOO_GOOD_LOG_V (5%) of log V
   where that is unknown, or TOO_GOOD_ABS (0.05 nats) where neither is: more than text allows (the
   best character models score about a fifth of the unigram entropy on held-out text). The targets
   leak (not shifted, a mask that shows t+1) or the val text is in the train text; with no
   evaluation, a memorised small corpus too.
4. unstable (`curve_instability.rule_unstable`), a finite loss that went the wrong way: it ended
   above the ceiling; or the smoothed loss went above max(FAR_RATIO (2) x baseline, ceiling) (no
   initialisation is that bad: it blew up, maybe before the first logged step), or above
   NO_BASELINE_CEILING without a baseline; or the smoothed loss rose above the ceiling from a lower
   level; or end > start + max(RISE_ABS 0.05, RISE_REL 5%); or the train trend rises by more than
   RISING_REL (2%) and RISING_SE (4) standard errors; or it stayed above start + max(SURGE_ABS 0.5,
   SURGE_REL 25%) for max(3, 10% of the points) in a row.
5. flat: never learned and never rose (no unstable reason, checked again): end within
   FLAT_BASELINE_MARGIN (0.05) of the baseline or above it; or a fall of less than FLAT_REL_DROP (2%)
   from a start at most FLAT_START_MARGIN (0.5 nats) below the baseline (further below, it learned
   before the first logged step: a plateau). Its learning-rate advice follows the logged peak: under
   FLAT_LR_LOW (1e-5) the rate is named as the cause; from FLAT_LR_USUAL (3e-4) on, "raise the
   learning rate" is dropped and the verdict says the rate is not what held the loss.
6. oscillating: over the second half of the run (at least OSC_MIN_EVALS, 4, evaluations) neither loss
   fell (a line's fall over 2 standard errors and PLATEAU_REL), and the val loss, an average over many
   batches, swings about its line by at least OSC_SWING_REL (1%) of its level and OSC_NOISE_SHARE (0.3)
   of the train loss's swing: the weights move, not only the batches. Learning rate too high.
7. overfitting: at least 3 finite val losses, the best before the last; the last val (with a measured
   val noise, the median of the last 3) above the best smoothed val level by max(OVERFIT_MARGIN_ABS
   0.02, OVERFIT_MARGIN_REL 2%, OVERFIT_NOISE 4 x val noise); while train fell from the best-val step on
   (a line's fall over OVERFIT_TRAIN_DROP, 0.5%, and 2 standard errors). Reports the gap val - train.
8. spikes (`curve_instability.rule_spikes`): blocks of clamp(n // 10, 3, 50) points; a point more
   than max(SPIKE_MIN_JUMP 0.5 nats, SPIKE_MADS 8 x scale) above the previous block's median (scale
   = median MAD of up to 4 blocks before) is a spike; the first block is not checked; consecutive
   spike points are one spike, reported at its peak. Drops are never spikes.
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
    STALL_EARLY,
    CurveDiagnosis,
    fmt_loss,
)
from minigpt.logs.curve_advice import RunSettings, diagnosis, first_words, fit_to_settings, last_words
from minigpt.logs.curve_instability import rule_nonfinite, rule_spikes, rule_unstable, unstable_reason
from minigpt.logs.curve_levels import rule_barely_learned, rule_scaled_loss, rule_too_good
from minigpt.logs.curve_series import (
    MIN_POINTS,
    Curve,
    Rule,
    derive,
    logged_lr_at,
    median,
    plateau_start,
    smooth3,
)
from minigpt.logs.curve_trend import IMPROVING_REL, IMPROVING_SE, PLATEAU_REL, TAIL, TREND_NOISY, line_fit
from minigpt.logs.metrics import MetricPoint


def _rule_too_short(c: Curve) -> CurveDiagnosis | None:
    n = len(c.ys)
    if n >= MIN_POINTS:
        return None
    return diagnosis(
        "too_short", f"too_short: {n} train loss value(s); need at least {MIN_POINTS} to judge the curve", c
    )


def _rule_flat(c: Curve) -> CurveDiagnosis | None:
    if unstable_reason(c) is not None:
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
    _flat_with_the_logged_lr(d, c.values["peak_lr"])
    return d


FLAT_LR_LOW = 1e-5  # a peak AdamW rate below this is too low to move a small GPT in a short run
FLAT_LR_USUAL = 3e-4  # from here up the usual AdamW range: raising the rate is not the advice


def _flat_with_the_logged_lr(d: CurveDiagnosis, peak: float | None) -> None:
    """A flat curve's learning-rate advice, held against the rate the log shows: "raise the learning
    rate" only where the logged peak is low or unknown; where it is in the usual range the cause is
    elsewhere (frozen or missing parameters, a detached loss, the data), and the verdict says so."""
    if peak is None:
        return  # no rate in the log: the advice stays a hypothesis, listed as such
    if peak < FLAT_LR_LOW:
        d.causes[0] = f"learning rate too low: the logged peak is {peak:.3g}, far below AdamW's usual 3e-4 to 1e-3"
        return
    if peak >= FLAT_LR_USUAL:
        d.causes = [x for x in d.causes if not x.startswith("learning rate too low")]
        d.fixes = [x for x in d.fixes if not x.startswith("raise the learning rate")]
        d.causes.insert(
            0,
            f"measured: the logged peak learning rate {peak:.3g} is in AdamW's usual range, so a rate too low "
            "is not what held the loss (unless the optimizer is plain SGD); the causes below remain",
        )


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
    ("nonfinite", rule_nonfinite),
    ("too_short", _rule_too_short),
    ("scaled_loss", rule_scaled_loss),
    ("too_good", rule_too_good),
    ("unstable", rule_unstable),
    ("flat", _rule_flat),
    ("oscillating", _rule_oscillating),
    ("overfitting", _rule_overfitting),
    ("spikes", rule_spikes),
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
