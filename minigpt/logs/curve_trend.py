"""The recent trend of a loss curve, at its end and at each earlier point of it. Pure Python.

The trend is a least-squares line through the last TAIL of the train losses (after the last LR cut,
once the drop has settled; without warm-up bump points): its relative fall across the window and the
standard error of that fall. When that error is above TREND_NOISY, the line through the last
max(4, TAIL) val losses is used instead if its error is smaller; the val series' own measured noise
floors that error (four readings can sit on a line by chance).

`TrendHistory` keeps running sums of both series, so the line through any window costs O(1) and the
trend can be replayed at up to CHECKPOINTS earlier ends of the log (every train point of a short log;
of a long one, those at multiples of a power of two). `replay` walks them with dead bands whose width
is the trend's own standard error, so a fall that wanders about a threshold as a run levels off
changes the verdict once, not at every evaluation:
- improving: starts once the fall is more than IMPROVING_REL (3%) + IMPROVING_SE (3) standard errors
  (a tail fit slides along the log and wanders: 2 errors are crossed now and then by a level loss);
  stops once it is below IMPROVING_REL.
- level: starts once the fall is below PLATEAU_REL (1%) with a standard error below 1%; stops once it
  is more than PLATEAU_REL + 1 standard error, or the error passes 2%.
"""

from __future__ import annotations

import bisect
import math
from array import array
from itertools import accumulate
from typing import NamedTuple

TAIL = 0.30
TREND_NOISY = 0.01
IMPROVING_REL = 0.03
IMPROVING_SE = 3.0  # standard errors the fall must clear IMPROVING_REL by to start counting as improving
PLATEAU_REL = 0.01  # a trend within 1% (and known to 1%) is level
CHECKPOINTS = 256  # earlier ends of the log the trend is replayed at, at most
NOISE_MIN_POINTS = 6  # readings needed to measure a series' noise from its second differences


class Fit(NamedTuple):
    """A least-squares line through a window of readings."""

    fall: float  # its relative fall across the window
    se: float  # the standard error of that fall
    spread: float  # the residuals' standard deviation (nats)
    level: float  # the readings' mean


def line_fit(xs: list[float], ys: list[float], noise: float | None = None) -> Fit:
    """The line through (xs, ys); `noise` (one reading's measured noise) floors the residual spread the
    standard error is computed from. Fewer than 3 points: fall 0, standard error inf."""
    m = len(xs)
    if m < 3:
        return Fit(0.0, math.inf, 0.0, sum(ys) / m if m else 0.0)
    dx = [x - xs[0] for x in xs]  # from the first x: large steps cancel less
    sums = [float(m), sum(dx), sum(ys), sum(x * x for x in dx), sum(x * y for x, y in zip(dx, ys))]
    return _fit([*sums, sum(y * y for y in ys)], dx[-1], noise)


def relative_fall(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Relative fall of the least-squares line across xs, and its standard error ((0, inf) if < 3 points)."""
    fit = line_fit(xs, ys)
    return fit.fall, fit.se


def _fit(sums: list[float], width: float, noise: float | None) -> Fit:
    """The line from the sums of 1, x, y, x^2, xy and y^2 over points spanning `width` in x."""
    m, sx, sy, sxx, sxy, syy = sums
    my = sy / m if m else 0.0
    if m < 3:
        return Fit(0.0, math.inf, 0.0, my)
    mx = sx / m
    vxx, vxy = sxx - m * mx * mx, sxy - m * mx * my
    if vxx <= 0 or my == 0:
        return Fit(0.0, math.inf, 0.0, my)
    slope = vxy / vxx
    resid = max(0.0, syy - m * my * my - slope * vxy)
    spread = math.sqrt(resid / (m - 2))
    span = width / abs(my)
    return Fit(-slope * span, max(spread, noise or 0.0) / math.sqrt(vxx) * span, spread, my)


def running_noise(ys: list[float]) -> list[float | None]:
    """One reading's noise about the series' local trend, for each prefix ys[:j] (j = 0..len): 1.4826 x
    the median |second difference| / sqrt(6) (a second difference of independent readings has variance
    6 sigma^2, a smooth trend adds little to it, and the median ignores the few at a bend). None under
    NOISE_MIN_POINTS readings. Per prefix so that a replay judges each earlier end with the noise known
    there, and the verdict's history does not move when a later reading moves the estimate."""
    out: list[float | None] = [None] * (len(ys) + 1)
    seen: list[float] = []  # the |second differences| so far, sorted
    for j in range(3, len(ys) + 1):
        bisect.insort(seen, abs(ys[j - 3] - 2 * ys[j - 2] + ys[j - 1]))
        if j >= NOISE_MIN_POINTS:
            k = len(seen)
            out[j] = 1.4826 * (seen[(k - 1) // 2] + seen[k // 2]) / 2 / math.sqrt(6)
    return out


class _Sums:
    """Running sums of 1, x, y, x^2, xy, y^2 over a series: the line through points [a, b) in O(1).
    x is measured from the series' first step, which keeps the sums' cancellation small."""

    def __init__(self, xs: list[float], ys: list[float]):
        self.xs = xs
        x0 = xs[0] if xs else 0.0
        dx = [x - x0 for x in xs]
        self.x0 = x0
        self.cols = [
            array("d", accumulate(col, initial=0.0))
            for col in (
                [1.0] * len(xs),
                dx,
                ys,
                [x * x for x in dx],
                [x * y for x, y in zip(dx, ys)],
                [y * y for y in ys],
            )
        ]

    def fit(self, a: int, b: int, noise: float | None = None) -> Fit:
        if b - a < 3:
            return Fit(0.0, math.inf, 0.0, 0.0)
        sums = [col[b] - col[a] for col in self.cols]
        return _fit(sums, self.xs[b - 1] - self.xs[a], noise)


class TrendHistory:
    """The trend at the end of the log and at earlier ends of it (see the module docstring).
    `steps`/`ys`: the finite train losses; `excused`: their indices left out (warm-up bumps);
    `vals`: (step, val loss); `cuts`: indices of the first train point after each LR cut; `val_noises`:
    `running_noise` of the val losses."""

    def __init__(
        self,
        steps: list[int],
        ys: list[float],
        excused: set[int],
        vals: list[tuple[int, float]],
        cuts: list[int],
        val_noises: list[float | None],
    ):
        self.steps, self.cuts, self.val_noises = steps, cuts, val_noises
        kept = [i for i in range(len(ys)) if i not in excused] if excused else range(len(ys))
        self.kept_steps = [steps[i] for i in kept]
        self.train = _Sums([float(s) for s in self.kept_steps], [ys[i] for i in kept])
        self.val_steps = [s for s, _ in vals]
        self.val = _Sums([float(s) for s in self.val_steps], [v for _, v in vals])

    def at(self, last: int, final: bool = False) -> tuple[Fit, Fit, str]:
        """(train fit, the fit the rules read, its series) over the log up to train index `last`;
        `final`: the whole log (val losses logged after the last train loss count too)."""
        steps, n = self.steps, last + 1
        tail_from = steps[0] + (1 - TAIL) * (steps[last] - steps[0])
        cut = self.cuts[bisect.bisect_right(self.cuts, last) - 1] if self.cuts and self.cuts[0] <= last else None
        after = 0 if cut is None else min(last, cut + max(3, n // 20))  # the drop settles first
        a = bisect.bisect_left(self.kept_steps, max(tail_from, steps[after]))
        b = bisect.bisect_right(self.kept_steps, steps[last])
        train = self.train.fit(a, b)
        if train.se <= TREND_NOISY:
            return train, train, "train"
        lo = bisect.bisect_left(self.val_steps, steps[after] if after else steps[0])
        hi = len(self.val_steps) if final else bisect.bisect_right(self.val_steps, steps[last])
        lo = max(lo, hi - max(4, round(TAIL * (hi - lo))))
        if hi - lo >= 4:
            val = self.val.fit(lo, hi, self.val_noises[hi])
            if val.se < train.se:
                return train, val, "val"
        return train, train, "train"

    def replay(self, first: int) -> tuple[bool, bool]:
        """Replay the trend from train index `first` to the end with the dead bands of the module
        docstring: whether the run counts as (improving, level) at its end."""
        n = len(self.steps)
        stride = 1
        while (n - first) // stride > CHECKPOINTS:
            stride *= 2  # powers of two: the checkpoints a longer log uses are a subset of these
        ends = [*range(first - first % stride + stride - 1, n - 1, stride), n - 1]
        improving = level = False
        for last in ends:
            if last < first:
                continue
            _, fit, _ = self.at(last, final=last == n - 1)
            fall, se = fit.fall, fit.se
            if improving:
                improving = fall >= IMPROVING_REL
            else:
                improving = fall - IMPROVING_SE * se > IMPROVING_REL
            if level:
                level = fall <= PLATEAU_REL + se and se < 2 * PLATEAU_REL
            else:
                level = fall < PLATEAU_REL and se < PLATEAU_REL
        return improving, level
