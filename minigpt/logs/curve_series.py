"""The series every curve rule reads, derived once from the metrics points (`derive` -> `Curve`), with the values
every diagnosis carries (`minigpt.logs.curve.VALUE_KEYS`). Pure Python (no torch, rich or textual).

Derived series
- points: one per step, merged (`metrics.merge_steps`): a later line at a step adds its fields and never
  erases one (an evaluation line, an end-of-training summary; a rerun step takes the new values). train:
  the finite train losses in step order; smooth: their running median of 3 (one noisy point is no trend).
- start / end: medians of the first / last 10% of the train points (at least 3). Summaries quote the
  last logged value (what the loss pane shows) next to the median: "last 17.9 (median of the last 3: 18.3)".
- ceiling: baseline + CEILING_MARGIN (0.5 nats worse than a uniform guess); without a baseline,
  NO_BASELINE_CEILING (20 nats: a mean cross-entropy no real vocabulary reaches at init, ln 5e8).
- val noise: one val reading's noise, from the median of its second differences (`curve_trend.
  running_noise`; at least NOISE_MIN_POINTS readings). The margins of overfitting and of the val trend.
- warmup: the step where the logged learning rate first reaches its peak, if it rose to it.
- warmup bumps: a rise of the smoothed loss more than max(BUMP_RISE_ABS, BUMP_RISE_REL) above its
  lowest level so far, starting while the LR still warms up, peaking below both BUMP_MAX_RATIO x that
  level and the ceiling, and coming back within max(RISE_ABS, RECOVER_REL) of it. Its points are left
  out of the sustained-rise and spike checks, and the summary names it.
- LR cuts: the logged LR falls LR_CUT_RATIO-fold or more between two logged points after changing by
  less than LR_STEADY_RATIO between the two before (a step decay, a resume with a lower --lr; not the
  smooth end of a cosine). The drop in loss after it is healthy, never a spike: the trend window
  starts max(3, 5% of the points) after the last cut (once the drop has settled), and the summary
  names the cut and the drop.
- LR raises: the logged LR rises LR_CUT_RATIO-fold or more between two logged points after not
  climbing between the two before (a resume with a higher --lr; a warm-up climbs). It ends the
  warm-up window (no warmup bump after it), is named in the summary, and is the first cause of an
  unstable / spikes / diverged verdict at or after it.
- trend (`curve_trend`): a least-squares line through the last TAIL (30%) of the train points (after the
  last LR cut, without warmup bumps): `recent_improvement` = its relative fall across the window, with
  its standard error. When that error is above TREND_NOISY (1%), the line through the last max(4, 30%)
  val losses is used instead if its error is smaller (its error floored by the val noise). The trend is
  replayed over the log with dead bands one to three standard errors wide: `improving` and `level`.
- learned: `fraction_below_guess` = (log V - end) / log V; with the unigram entropy H1 of the training
  tokens (what the output bias alone scores), `learned_fraction` = (log V - end) / (log V - H1).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from minigpt.logs.curve import FLAT_BASELINE_MARGIN, RISE_ABS, VALUE_KEYS, CurveDiagnosis, fmt_loss
from minigpt.logs.curve_trend import IMPROVING_REL, PLATEAU_REL, TrendHistory, running_noise
from minigpt.logs.metrics import MetricPoint, merge_steps
from minigpt.logs.perplexity import perplexity

MIN_POINTS = 5
CEILING_MARGIN = 0.5  # nats above log V: worse than guessing uniformly
NO_BASELINE_CEILING = 20.0  # nats; e**20 ~ 5e8 tokens, no vocabulary is that large
BUMP_RISE_ABS, BUMP_RISE_REL = 0.1, 0.10
BUMP_MAX_RATIO = 2.0
RECOVER_REL = 0.05
LR_CUT_RATIO, LR_STEADY_RATIO = 2.0, 1.25


@dataclass
class Curve:
    """The series every rule reads, derived once from the metrics points (see the module docstring)."""

    points: list[MetricPoint]  # one per step, in step order
    baseline: float | None
    values: dict
    unigram: float | None = None  # the unigram entropy of the training data, if known
    steps: list[int] = field(default_factory=list)  # of the finite train losses
    ys: list[float] = field(default_factory=list)  # the finite train losses
    vals: list[tuple[int, float]] = field(default_factory=list)  # (step, finite val loss)
    lrs: list[tuple[int, float]] = field(default_factory=list)  # (step, finite learning rate)
    smooth: list[float] = field(default_factory=list)  # running median of 3 of ys
    start: float = math.nan
    end: float = math.nan
    edge: int = 0
    ceiling: float = math.inf
    warmup_end: int | None = None
    bumps: list[tuple[int, int, int]] = field(default_factory=list)  # (rise, peak, recovered) indices
    excused: set[int] = field(default_factory=set)  # indices inside warmup bumps
    cuts: list[tuple[int, float, float]] = field(default_factory=list)  # (index after, lr before, lr after)
    raises: list[tuple[int, float, float]] = field(default_factory=list)  # the same, for a jump up
    train_trend: tuple[float, float] = (0.0, math.inf)  # (relative fall, standard error) of the train tail
    trend: tuple[float, float] = (0.0, math.inf)  # the one the plateau / improving rules use
    trend_series: str = "train"
    improving: bool = False  # the trend, replayed with its dead bands (curve_trend), still falls
    level: bool = False  # ... or is level
    val_noise: float | None = None  # one val reading's noise (curve_trend.running_noise of the val series)
    val_noises: list[float | None] = field(default_factory=list)  # ... of its first j readings, for each j
    notes: list[str] = field(default_factory=list)  # appended to the summary


Rule = Callable[[Curve], "CurveDiagnosis | None"]  # reads the series; names a shape or passes (curve_rules.RULES)


def median(seg: list[float]) -> float:
    s = sorted(seg)
    k = len(s)
    return (s[(k - 1) // 2] + s[k // 2]) / 2


def logged_lr_at(points: list[MetricPoint], step: int) -> float | None:
    """The lr the log holds for this step, else the last one logged before it (the schedule itself is
    `minigpt.train.config.lr_at`)."""
    found = None
    for p in points:
        if p.step > step:
            break
        if p.lr is not None:
            found = p.lr
    return found


def smooth3(ys: list[float]) -> list[float]:
    """Running median of 3; the two ends are the mean of their pair (needs 2 or more values)."""
    middle = [sorted(t)[1] for t in zip(ys, ys[1:], ys[2:])]
    return [(ys[0] + ys[1]) / 2, *middle, (ys[-2] + ys[-1]) / 2]


def blocks(n: int, size: int) -> list[tuple[int, int]]:
    """Blocks of `size` consecutive indices; the last one takes the remainder."""
    nb = max(1, n // size)
    return [(b * size, (b + 1) * size if b < nb - 1 else n) for b in range(nb)]


def _warmup_end(lrs: list[tuple[int, float]]) -> int | None:
    if len(lrs) < 2:
        return None
    peak = max(lr for _, lr in lrs)
    if peak <= 0 or lrs[0][1] >= 0.99 * peak:
        return None
    return next(step for step, lr in lrs if lr >= 0.99 * peak)


def _warmup_bumps(c: Curve) -> list[tuple[int, int, int]]:
    if c.warmup_end is None:
        return []
    sm, n, out = c.smooth, len(c.smooth), []
    i, level = 1, sm[0]
    while i < n and c.steps[i] <= c.warmup_end:
        level = min(level, sm[i - 1])  # the lowest smoothed loss before i
        if sm[i] <= level + max(BUMP_RISE_ABS, BUMP_RISE_REL * abs(level)):
            i += 1
            continue
        back = level + max(RISE_ABS, RECOVER_REL * abs(level))
        end = next((k for k in range(i + 1, n) if sm[k] <= back), None)
        if end is None or max(sm[i:end]) > min(BUMP_MAX_RATIO * level, c.ceiling):
            break  # never came back, or too high to be a bump: the unstable rule judges it
        rise = max(1, i - 1)
        out.append((rise, max(range(rise, end), key=c.ys.__getitem__), end))
        level, i = min(sm[i:end]), end
    return out


def _lr_cuts(c: Curve) -> list[tuple[int, float, float]]:
    lrs = c.lrs
    rates = [lr for _, lr in lrs]
    out = []
    for k in [k for k, (a, b) in enumerate(zip(rates, rates[1:]), 1) if a >= LR_CUT_RATIO * b > 0]:  # few
        (_, before), (step, after) = lrs[k - 1], lrs[k]
        steady = k < 2 or max(lrs[k - 2][1], before) <= LR_STEADY_RATIO * min(lrs[k - 2][1], before)
        if steady:
            index = bisect.bisect_left(c.steps, step)
            if 0 < index < len(c.steps):
                out.append((index, before, after))
    return out


def _lr_raises(lrs: list[tuple[int, float]]) -> list[int]:
    """Indices into `lrs` where the LR jumped LR_CUT_RATIO-fold up after two points that were not
    climbing (steady, or decaying on a schedule): a resume with a higher --lr, never a warm-up (a
    warm-up climbs before, and never doubles in one logged step after its first two)."""
    out = []
    for k in range(2, len(lrs)):
        (_, a), (_, before), (_, after) = lrs[k - 2], lrs[k - 1], lrs[k]
        if after >= LR_CUT_RATIO * before > 0 and before <= LR_STEADY_RATIO * a:  # steady or decaying before
            out.append(k)
    return out


def _trends(c: Curve) -> None:
    history = TrendHistory(c.steps, c.ys, c.excused, c.vals, [i for i, _, _ in c.cuts], c.val_noises)
    train, trend, c.trend_series = history.at(len(c.ys) - 1, final=True)
    c.train_trend, c.trend = (train.fall, train.se), (trend.fall, trend.se)
    c.improving, c.level = history.replay(MIN_POINTS - 1)


def derive(points: Iterable[MetricPoint], baseline: float | None = None, unigram_entropy: float | None = None) -> Curve:
    """Every derived series the rules read, and the `values` every diagnosis carries."""
    pts = merge_steps(points)  # an evaluation or summary line at a step adds to it, never erases it
    v: dict = dict.fromkeys(VALUE_KEYS)
    v.update(baseline=baseline, spike_steps=[], n_train_points=0, n_val_points=0, warmup_bump_steps=[])
    v.update(lr_cut_steps=[], unigram_entropy=unigram_entropy)
    inf = math.inf  # `-inf < x < inf` is False for None-free NaN and +-inf, without a call per point
    train = [(p.step, p.train_loss) for p in pts if p.train_loss is not None and -inf < p.train_loss < inf]
    vals = [(p.step, p.val_loss) for p in pts if p.val_loss is not None and -inf < p.val_loss < inf]
    c = Curve(pts, baseline, v, unigram_entropy, [s for s, _ in train], [y for _, y in train], vals)
    c.val_noises = running_noise([y for _, y in vals])
    c.val_noise = c.val_noises[-1]
    c.lrs = [(p.step, p.lr) for p in pts if p.lr is not None and -inf < p.lr < inf]
    c.ceiling = baseline + CEILING_MARGIN if baseline is not None else NO_BASELINE_CEILING
    v.update(ceiling=c.ceiling, peak_lr=max(lr for _, lr in c.lrs) if c.lrs else None)
    if pts:
        v.update(first_step=pts[0].step, last_step=pts[-1].step)
    if vals:
        best_step, best_val = min(vals, key=lambda sv: sv[1])
        v.update(
            last_val_loss=vals[-1][1],
            val_perplexity=perplexity(vals[-1][1]),
            best_val_loss=best_val,
            best_val_step=best_step,
            n_val_points=len(vals),
        )
    ys, n = c.ys, len(c.ys)
    if ys:
        peak = max(range(n), key=ys.__getitem__)
        v.update(
            first_train_loss=ys[0],
            last_train_loss=ys[-1],
            min_train_loss=min(ys),
            n_train_points=n,
            peak_train_loss=ys[peak],
            peak_train_step=c.steps[peak],
        )
    if n < MIN_POINTS:
        return c
    c.smooth = smooth3(ys)
    c.edge = max(3, n // 10)
    c.start, c.end = median(ys[: c.edge]), median(ys[-c.edge :])
    last_val = v["last_val_loss"]
    v.update(
        edge_points=c.edge,
        start_train_loss=c.start,
        end_train_loss=c.end,
        relative_drop=(c.start - c.end) / abs(c.start) if c.start else 0.0,
        train_perplexity=perplexity(c.end),
        generalisation_gap=None if last_val is None else last_val - c.end,
        val_noise=c.val_noise,
    )
    if baseline:
        v["fraction_below_guess"] = (baseline - c.end) / baseline
        if unigram_entropy is not None and baseline - unigram_entropy > FLAT_BASELINE_MARGIN:
            v["learned_fraction"] = (baseline - c.end) / (baseline - unigram_entropy)
    raised = _lr_raises(c.lrs)
    c.warmup_end = _warmup_end(c.lrs[: raised[0]] if raised else c.lrs)  # a resume's jump is no warm-up
    for k in raised:
        index = bisect.bisect_left(c.steps, c.lrs[k][0])
        if 0 < index < len(c.steps):
            c.raises.append((index, c.lrs[k - 1][1], c.lrs[k][1]))
    c.bumps = _warmup_bumps(c)
    c.excused = {i for rise, _, end in c.bumps for i in range(rise, end)}
    c.cuts = _lr_cuts(c)
    _trends(c)
    v.update(
        warmup_end_step=c.warmup_end,
        warmup_bump_steps=[[c.steps[r], c.steps[p], c.steps[e]] for r, p, e in c.bumps],
        lr_cut_steps=[c.steps[i] for i, _, _ in c.cuts],
        lr_raise_steps=[c.steps[i] for i, _, _ in c.raises],
        recent_improvement=c.trend[0],
        recent_improvement_se=c.trend[1],
        trend_series=c.trend_series,
        improving_band=[IMPROVING_REL - c.trend[1], IMPROVING_REL + c.trend[1]],
    )
    for _rise, peak, end in c.bumps:
        c.notes.append(
            f"a warmup bump to {fmt_loss(ys[peak])} at step {c.steps[peak]} "
            f"came back by step {c.steps[end]} (not a fault)"
        )
    for i, before, after in c.cuts:
        cut = c.steps[i]
        val_before = [val for s, val in c.vals if s < cut]
        val_after = [val for s, val in c.vals if s >= cut]
        if val_before and val_after:
            which, lo, hi = "val", val_before[-1], val_after[0]
        else:
            which, lo, hi = "train", median(ys[max(0, i - 3) : i]), median(ys[i : i + 3])
        moved = f"{which} loss {fmt_loss(lo)} -> {fmt_loss(hi)}" + (", a healthy drop" if hi < lo else "")
        c.notes.append(f"learning rate cut from {before:.3g} to {after:.3g} at step {cut} ({moved})")
    for i, before, after in c.raises:
        lo, hi = median(ys[max(0, i - 3) : i]), median(ys[i : i + 3])
        c.notes.append(
            f"learning rate raised {after / before:.3g}x, from {before:.3g} to {after:.3g}, at step {c.steps[i]} "
            f"(a resume with a higher --lr?; train loss {fmt_loss(lo)} -> {fmt_loss(hi)})"
        )
    return c


def plateau_start(c: Curve) -> int:
    """The first step from which the smoothed series stays within PLATEAU_REL of where it ends."""
    if c.trend_series == "val":
        xs, ys = [s for s, _ in c.vals], [v for _, v in c.vals]
        level = ys[-1]
    else:
        bounds = blocks(len(c.ys), max(1, min(50, len(c.ys) // 20)))
        xs, ys = [c.steps[a] for a, _ in bounds], [median(c.ys[a:z]) for a, z in bounds]
        level = c.end
    return next(x for x, y in zip(xs, ys) if y <= level + PLATEAU_REL * abs(level))
