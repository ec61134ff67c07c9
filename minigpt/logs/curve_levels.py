"""The curve rules that compare the loss's level with a reference outside its own shape: the val loss
beside it (`rule_scaled_loss`: a logged train loss off by a factor) and log V and the unigram entropy
(`rule_barely_learned`: how much a slow run learned). `curve_rules.RULES` orders them among the others;
the thresholds and their reasons are in `minigpt.logs.curve_rules`' docstring."""

from __future__ import annotations

import bisect

from minigpt.logs.curve import (
    BARELY_FRACTION,
    BARELY_REL,
    SCALE_FAR,
    SCALE_FIRST_STEP,
    SCALE_MIN_EVALS,
    SCALE_STEADY,
    SCALE_WHOLE,
    STALL_EARLY,
    TOO_GOOD_ABS,
    TOO_GOOD_LOG_V,
    TOO_GOOD_UNIGRAM,
    CurveDiagnosis,
    fmt_loss,
)
from minigpt.logs.curve_advice import diagnosis, first_words, last_words
from minigpt.logs.curve_series import Curve, median, plateau_start
from minigpt.logs.curve_trend import TAIL


def _train_near(c: Curve, step: int) -> float:
    """The median of the (up to) 3 train losses logged nearest `step`: one batch's noise halved."""
    i = bisect.bisect_left(c.steps, step)
    near = sorted(range(max(0, i - 2), min(len(c.steps), i + 2)), key=lambda k: abs(c.steps[k] - step))[:3]
    return median([c.ys[k] for k in near])


def _whole(x: float) -> int | None:
    """The integer k >= 2 that x is within SCALE_WHOLE of, if any."""
    k = round(x)
    return k if k >= 2 and abs(x - k) <= SCALE_WHOLE * k else None


def rule_scaled_loss(c: Curve) -> CurveDiagnosis | None:
    """A logged train loss off by a factor: train / val near-constant far from 1 from the first
    evaluation on (overfitting opens the gap slowly, dropout keeps it near 1), or a fresh model's
    first loss far below log V with no evaluation saying otherwise."""
    v, steps = c.values, c.steps
    ratios = [(s, _train_near(c, s) / val) for s, val in c.vals if val > 0]
    far = [s for s, r in ratios if not 1 / SCALE_FAR < r < SCALE_FAR]
    first = ""
    if c.baseline and c.ys[0] <= c.baseline / SCALE_FAR:
        first = f"first train loss {fmt_loss(c.ys[0])} at step {steps[0]} vs log V {c.baseline:.3f}"
    if len(ratios) >= SCALE_MIN_EVALS:
        r = median([x for _, x in ratios])
        spread = 1.4826 * median([abs(x - r) for _, x in ratios]) / r
        v.update(train_val_ratio=r, train_val_ratio_spread=spread)
        if len(far) < len(ratios) or spread > SCALE_STEADY:
            return None
        k = _whole(1 / r if r < 1 else r)
        words = (
            f"the train loss is {r:.3g} x the val loss (median of {len(ratios)} evaluations, +- {spread:.0%}), "
            f"from the first evaluation (step {ratios[0][0]}) on"
        )
    elif ratios and len(far) < len(ratios):
        return None  # an evaluation puts train next to val: a model that did not start fresh, not a scale
    elif first and steps[0] <= SCALE_FIRST_STEP:
        r = c.ys[0] / c.baseline  # type: ignore[operator]
        k = _whole(1 / r)
        words, first = f"the {first}: {r:.3g} x what a freshly initialised model scores", ""
    else:
        return None
    v["scale_factor"] = k
    what = "" if k is None else (f": about 1/{k}" if r < 1 else f": about {k}x")
    d = diagnosis(
        "scaled_loss", f"scaled_loss: {words}{what}" + (f"; {first}" if first else "") + f"; {last_words(c)}", c
    )
    if r > 1:
        many = f"{k} micro-batches or tokens" if k else "micro-batches or tokens"
        d.causes[0] = f"the train loss is summed over {many} where the val loss is averaged"
    elif k is not None:
        d.causes[0] = d.causes[0].replace("accumulation count", f"accumulation count ({k} by this ratio)", 1)
    return d


def rule_too_good(c: Curve) -> CurveDiagnosis | None:
    """A loss below what text allows: the last val loss (the train loss's end without one) under
    TOO_GOOD_UNIGRAM of the unigram entropy, or TOO_GOOD_LOG_V of log V where that is unknown, or
    TOO_GOOD_ABS nats where neither is. A
    model scores that only when it is shown the answer. A train loss alone may also be a small
    corpus memorised over many epochs: with no evaluation, the verdict says both."""
    v = c.values
    if c.unigram:
        floor = TOO_GOOD_UNIGRAM * c.unigram
        limit = f"{fmt_loss(floor)} ({TOO_GOOD_UNIGRAM:.0%} of the unigram entropy {c.unigram:.3f})"
    elif c.baseline:
        floor = TOO_GOOD_LOG_V * c.baseline
        limit = f"{fmt_loss(floor)} ({TOO_GOOD_LOG_V:.0%} of log V {c.baseline:.3f})"
    else:
        floor = TOO_GOOD_ABS
        limit = f"{fmt_loss(floor)} nats per token, near 0 (log V and the unigram entropy are unknown here)"
    if c.vals:
        step, level = c.vals[-1]
        what = f"val loss {fmt_loss(level)} at step {step}"
    else:
        step, level = c.steps[-1], c.end
        what = f"train loss {fmt_loss(level)} (median of the last {c.edge}) at step {step}, with no evaluation"
    if not level < floor:
        return None
    v.update(too_good_level=level, too_good_floor=floor)
    d = diagnosis(
        "too_good",
        f"too_good: {what}, below {limit}: no real text is that predictable; {first_words(c)}, {last_words(c)}",
        c,
    )
    if not c.vals:
        d.causes.append("the run memorised a small corpus over many epochs (an evaluation on held-out text tells)")
    return d


def rule_barely_learned(c: Curve) -> CurveDiagnosis | None:
    """The loss ended a small part of the way from log V to what predicting each token's frequency alone
    scores (the unigram entropy; without it, a small part below log V) and did not stall early: a slow
    learner. A loss that stalled in the first STALL_EARLY of the run is the plateau rule's."""
    v = c.values
    if c.baseline is None:
        return None
    if v["learned_fraction"] is not None:
        if v["learned_fraction"] >= BARELY_FRACTION:
            return None
        words = (
            f"{v['learned_fraction']:.0%} of the way from log V {c.baseline:.3f} to the unigram entropy "
            f"{c.unigram:.3f} (each token's frequency alone)"
        )
    elif v["fraction_below_guess"] < BARELY_REL:
        words = f"{v['fraction_below_guess']:.1%} below log V {c.baseline:.3f} (unigram entropy unknown)"
    else:
        return None
    if plateau_start(c) - c.steps[0] <= STALL_EARLY * (c.steps[-1] - c.steps[0]):
        return None  # stalled early: the plateau rule's "learning rate too high", not a slow learner
    fall, se = c.trend
    how = "still falling slowly" if fall > 2 * se else "level at the end"
    d = diagnosis(
        "barely_learned",
        f"barely_learned: train loss ended {words} by step {c.steps[-1]}, {how} ({100 * fall:+.1f}% +- "
        f"{100 * se:.1f}% over the last {TAIL:.0%}, {c.trend_series}); {first_words(c)}, {last_words(c)}",
        c,
    )
    peak_lr = v["peak_lr"]
    if peak_lr:
        d.causes[0] = d.causes[0].replace("too low", f"too low (peak {peak_lr:.3g})", 1)
        d.fixes[0] = f"raise the learning rate 3-10x (peak {peak_lr:.3g}: try {3 * peak_lr:.2g} to {10 * peak_lr:.2g})"
    return d
