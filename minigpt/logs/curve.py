"""A loss curve's diagnosis: the shapes it names and their status (SHAPE_SEVERITY), the numbers it carries
(VALUE_KEYS), `CurveDiagnosis`, and the thresholds the rules judge by. Pure Python (no torch, rich or textual).
Reading and following `logs/metrics.jsonl` lives in `minigpt.logs.metrics`; the series every rule reads in
`minigpt.logs.curve_series`; the rules in order, what each threshold means, and `diagnose` in
`minigpt.logs.curve_rules` (scaled_loss and barely_learned in `curve_levels`), their words in `curve_advice`; the
recent trend and its history in `minigpt.logs.curve_trend`; e**loss in `minigpt.logs.perplexity`.

`diagnose(points, baseline=log V, unigram_entropy=H1)` first derives the series every rule reads
(`derive` -> `Curve`), then tries the rules of `RULES` in order; the first that returns a diagnosis wins.
Every rule knows which way the loss went: a loss that rose is never "flat" and never gets "raise the
learning rate". A shape is named on a measurement that clears the series' own noise, and the verdict
says what was measured and the margin it cleared (in words and in `values`), so a verdict changes only
when the evidence does.

Advice follows the direction: only "flat" and "barely_learned" (never rose, learned little) offer
"raise the learning rate"; "unstable" names the run's peak LR and a 3-10x lower range, "oscillating" a
3x lower one; a plateau reached in the first 20% of the run puts "learning rate too high" first.
SHAPE_SEVERITY maps each shape to pass | warn | fail | skip for the training_curve check: healthy and
still_improving pass (nothing to fix), too_short skips, diverged / unstable / flat fail (broken or
wasted runs), the rest warn (the run may still be usable: for overfitting its best checkpoint, for a
scaled loss its val curve).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# the rules' thresholds (curve_rules' docstring says what each one measures); the ceiling, MIN_POINTS and the
# warm-up and LR-change limits belong to the derived series (curve_series)
FAR_RATIO = 2.0  # a loss above 2 x log V (perplexity V**2) is no initialisation: it blew up
RISE_ABS, RISE_REL = 0.05, 0.05
SURGE_ABS, SURGE_REL = 0.5, 0.25
RISING_REL = 0.02
RISING_SE = 4.0  # standard errors: a converged noisy loss, judged at every step of a live run, tops 2 or 3 now and then
FLAT_REL_DROP = 0.02
FLAT_BASELINE_MARGIN = 0.05  # 0.05 rather than 0.02 so a noisy median at log V still counts
FLAT_START_MARGIN = 0.5
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
# a loss below this share of the unigram entropy (of log V, where that is unknown) is more than text
# allows: the best character models score about a fifth of the unigram entropy on held-out text
TOO_GOOD_UNIGRAM = 0.1
TOO_GOOD_LOG_V = 0.05
TOO_GOOD_ABS = 0.05  # nats per token, where neither is known: near 0, which no real text is
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
    "too_good": "fail",  # a level no text allows: the model is shown the answers
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


def fmt_loss(x: float) -> str:
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.4g}"
