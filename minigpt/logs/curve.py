"""Name the shape of a loss curve with a table of rules. Pure Python (no torch, rich or textual).
Reading and following `logs/metrics.jsonl` lives in `minigpt.logs.metrics`; the rules and `diagnose` in
`minigpt.logs.curve_rules` (scaled_loss and barely_learned in `curve_levels`), their words in `curve_advice`;
the recent trend and its history in `minigpt.logs.curve_trend`.

`diagnose(points, baseline=log V, unigram_entropy=H1)` first derives the series every rule reads
(`derive` -> `Curve`), then tries the rules of `RULES` in order; the first that returns a diagnosis wins.
Every rule knows which way the loss went: a loss that rose is never "flat" and never gets "raise the
learning rate". A shape is named on a measurement that clears the series' own noise, and the verdict
says what was measured and the margin it cleared (in words and in `values`), so a verdict changes only
when the evidence does.

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

Advice follows the direction: only "flat" and "barely_learned" (never rose, learned little) offer
"raise the learning rate"; "unstable" names the run's peak LR and a 3-10x lower range, "oscillating" a
3x lower one; a plateau reached in the first 20% of the run puts "learning rate too high" first.
SHAPE_SEVERITY maps each shape to pass | warn | fail | skip for the training_curve check: healthy and
still_improving pass (nothing to fix), too_short skips, diverged / unstable / flat fail (broken or
wasted runs), the rest warn (the run may still be usable: for overfitting its best checkpoint, for a
scaled loss its val curve).

The real curves in tests/fixtures/curves (tools/make_curve_fixtures.py) give every rule a run it fires
on and one it does not.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from minigpt.logs.curve_trend import IMPROVING_REL, PLATEAU_REL, TrendHistory, running_noise
from minigpt.logs.metrics import MetricPoint, merge_steps

MIN_POINTS = 5
CEILING_MARGIN = 0.5  # nats above log V: worse than guessing uniformly
NO_BASELINE_CEILING = 20.0  # nats; e**20 ~ 5e8 tokens, no vocabulary is that large
FAR_RATIO = 2.0  # a loss above 2 x log V (perplexity V**2) is no initialisation: it blew up
RISE_ABS, RISE_REL = 0.05, 0.05
SURGE_ABS, SURGE_REL = 0.5, 0.25
RISING_REL = 0.02
RISING_SE = 4.0  # standard errors: a converged noisy loss, judged at every step of a live run, tops 2 or 3 now and then
FLAT_REL_DROP = 0.02
FLAT_BASELINE_MARGIN = 0.05  # 0.05 rather than 0.02 so a noisy median at log V still counts
FLAT_START_MARGIN = 0.5
BUMP_RISE_ABS, BUMP_RISE_REL = 0.1, 0.10
BUMP_MAX_RATIO = 2.0
RECOVER_REL = 0.05
LR_CUT_RATIO, LR_STEADY_RATIO = 2.0, 1.25
OVERFIT_MARGIN_ABS, OVERFIT_MARGIN_REL = 0.02, 0.02
OVERFIT_NOISE = 4.0  # val readings: a rise must clear 4 x the val series' own noise
OVERFIT_TRAIN_DROP = 0.005
SCALE_FAR = 1.8  # train / val ratio outside [1 / 1.8, 1.8]: no dropout or split difference does that
SCALE_STEADY = 0.15  # the ratio's spread (MAD-based, relative) below which it is "near-constant"
SCALE_MIN_EVALS = 3
SCALE_FIRST_STEP = 1  # a loss logged at step 0 or 1 is a fresh model's: about log V
SCALE_WHOLE = 0.12  # a ratio within 12% of 1/k (or k) names the integer k
OSC_MIN_EVALS = 4  # val readings in the second half needed to see the weights swing
OSC_SWING_REL = 0.01  # val residuals' spread, relative to its level
OSC_NOISE_SHARE = 0.3  # val spread / train spread: a val loss over >= 12 batches swings less by sampling alone
BARELY_FRACTION = 0.5  # of the way from log V to the unigram entropy
BARELY_REL = 0.10  # below log V, when the unigram entropy is unknown
SPIKE_MIN_JUMP = 0.5
SPIKE_MIN_BLOCK, SPIKE_SCALE_BLOCKS = 3, 4
SPIKE_MADS = 8.0  # 8 MADs ~ 5.4 sigma of Gaussian noise; 5 MADs (3.4 sigma) fires on noise in long runs
PLATEAU_EARLY = 0.5
STALL_EARLY = 0.2  # a loss level from the first 20% of the run on stalled early: learning rate too high

# "pass": nothing to fix; "warn": worth a look, the run may still be usable; "fail": the run is broken
# or wasted (it went the wrong way, or learned nothing); "skip": too little to judge.
SHAPE_SEVERITY: dict[str, str] = {
    "healthy": "pass",
    "still_improving": "pass",  # nothing wrong, it just stopped early
    "too_short": "skip",
    "diverged": "fail",
    "unstable": "fail",
    "flat": "fail",
    "scaled_loss": "warn",  # the logged number is off by a factor; the model may be fine
    "oscillating": "warn",
    "spikes": "warn",
    "barely_learned": "warn",
    "plateau": "warn",
    "overfitting": "warn",  # the best checkpoint is still good
}

VALUE_KEYS = (
    "first_step",
    "last_step",
    "n_train_points",
    "n_val_points",
    "first_train_loss",
    "last_train_loss",
    "min_train_loss",
    "start_train_loss",
    "end_train_loss",
    "relative_drop",
    "last_val_loss",
    "best_val_loss",
    "best_val_step",
    "train_perplexity",
    "val_perplexity",
    "generalisation_gap",
    "spike_steps",
    "first_nonfinite_step",
    "nonfinite_what",
    "lr_at_instability",
    "recent_improvement",
    "recent_improvement_se",
    "plateau_start_step",
    "lr_at_plateau_start",
    "baseline",
    # added with the rule table
    "rule",  # the rule that named the shape
    "edge_points",  # how many points the start/end medians use
    "peak_train_loss",
    "peak_train_step",
    "peak_lr",
    "ceiling",
    "unstable_reason",  # above_ceiling | far_above_guess | rose_above_ceiling | ended_above_start | rising | surge
    "trend_series",  # train | val: the series recent_improvement was measured on
    "warmup_end_step",
    "warmup_bump_steps",  # [[rise, peak, recovered], ...]
    "lr_cut_steps",  # steps of the first point logged at the lower LR
    "lr_raise_steps",  # steps of the first point logged at a much higher LR after a steady one (a resume)
    # noise margins and the verdicts on scale, swings and what was learned
    "val_noise",  # one val reading's noise (from second differences; None under NOISE_MIN_POINTS readings)
    "overfit_rise",  # last val - the best smoothed val level
    "overfit_margin",  # what that rise had to clear: max(0.02, 2%, OVERFIT_NOISE x val_noise)
    "train_fall_since_best",  # relative fall of the train loss from the best-val step on
    "train_fall_since_best_se",
    "train_val_ratio",  # median train / val at the evaluations (train: median of the 3 nearest points)
    "train_val_ratio_spread",  # its relative spread (1.4826 MAD / median)
    "scale_factor",  # the integer k the ratio is 1/k (or k) of, if it is
    "swing_val",  # residual spread of val about its line over the second half
    "swing_train",  # the same for train
    "swing_from_step",
    "unigram_entropy",  # the loss of predicting each token's frequency alone (when the data is known)
    "improving_band",  # [IMPROVING_REL - 1 s.e., + 1 s.e.]: the fall has to leave it to change the verdict
    "learned_fraction",  # (log V - end) / (log V - unigram entropy)
    "fraction_below_guess",  # (log V - end) / log V
)


@dataclass
class CurveDiagnosis:
    shape: str  # a key of SHAPE_SEVERITY
    summary: str  # one line in words
    values: dict = field(default_factory=dict)  # the numbers the rules used (VALUE_KEYS)
    causes: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)


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


def median(seg: list[float]) -> float:
    s = sorted(seg)
    k = len(s)
    return (s[(k - 1) // 2] + s[k // 2]) / 2


def perplexity(loss: float | None) -> float | None:
    """e**loss; inf past where exp overflows (~709), None for no loss. The one perplexity every view uses."""
    if loss is None:
        return None
    return math.exp(loss) if loss < 700 else float("inf")


def perplexity_text(loss: float | None) -> str:
    """Perplexity for a line of text: `14.10`, `1.5e59` past a million (the digits of e**136 ran
    three lines), `inf` past exp's range, `-` for no or a non-finite loss."""
    if loss is None or not math.isfinite(loss):
        return "-"
    value = perplexity(loss)
    if value is None or math.isinf(value):
        return "inf"
    if value < 1e6:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def lr_at(points: list[MetricPoint], step: int) -> float | None:
    """This step's lr, else the last one logged before it."""
    found = None
    for p in points:
        if p.step > step:
            break
        if p.lr is not None:
            found = p.lr
    return found


def fmt_loss(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.4g}"


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


# -- the rules ------------------------------------------------------------------------------

Rule = Callable[[Curve], "CurveDiagnosis | None"]
