"""The Loss pane's curve as data, in memory bounded whatever the log's length: `CurveStore` is fed
the points the follower reads and hands out `CurveSnapshot`s already downsampled to the plot's
width, and the points a diagnosis reads. What to show (width, log scale, smoothing, zoom, earlier
runs) is a `LossView`, an immutable value the UI thread replaces and the reading thread only reads.
Pure Python (no torch, no textual).

Three bounded parts, each sized for what it serves:
- for the whole-run plot, one `PlotColumn` per series: the points as they came while few, then the
  min and max of each block of consecutive points (spikes and dips survive), the block doubling
  whenever the column fills up;
- for the zoom (`z`: the last N steps), the last `TAIL_POINTS` points of each series, exact;
- for the verdict, the same bounded sample the check judges (`minigpt.logs.curve_sample`), so the
  pane and `minigpt check` name the same shape.
The smoothed curves (`m`) are computed as the points arrive, one per weight of `EMA_CHOICES`, so
changing the weight never needs the points already read.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from minigpt.logs.curve_sample import CurveSample
from minigpt.logs.metrics import MetricPoint

_FIELDS = ("train_loss", "val_loss", "lr")
EMA_CHOICES = (0.0, 0.6, 0.9, 0.98)  # `m` cycles through them; 0 = raw
ZOOM_CHOICES = (None, 2000, 500, 100)  # `z` cycles: all steps, then the last N
PLOT_POINTS = 8192  # points a series keeps for the whole-run plot (a plot is a few hundred columns wide)
TAIL_POINTS = 4096  # exact points a series keeps for the zoom


@dataclass(frozen=True)
class LossView:
    """How to draw the curve. Frozen: the UI thread swaps in a new one, the reader sees whole values."""

    width: int = 80  # plot columns (read on the UI thread, on resize)
    log_y: bool = False
    ema: float = 0.0  # weight of the past in the smoothed train loss (0 = off)
    last_steps: int | None = None  # zoom: only the last N steps
    previous: bool = False  # overlay earlier runs from previous/<time>/logs/metrics.jsonl

    def describe(self) -> str:
        """Short words for what is not the default ("log · EMA 0.9 · last 500")."""
        parts = ["log" if self.log_y else "", f"EMA {self.ema:g}" if self.ema else ""]
        parts += [f"last {self.last_steps}" if self.last_steps else "", "+prev" if self.previous else ""]
        return " · ".join(p for p in parts if p)


@dataclass
class CurveSnapshot:
    """What the loss pane shows: series downsampled to the plot width, and the latest values."""

    series: dict[str, tuple[list, list]] = field(default_factory=dict)  # field -> (steps, values)
    n_points: int = 0  # metrics records read so far
    last_step: int | None = None
    first_step: int | None = None  # the run's first logged step (a zoom shorter than the run shows part of it)
    last: dict[str, float | None] = field(default_factory=dict)  # field -> latest value
    bad_lines: int = 0
    view: LossView = field(default_factory=LossView)
    smooth: tuple[list, list] = ([], [])  # EMA of the train loss (view.ema), downsampled
    previous: list[tuple[str, list, list]] = field(default_factory=list)  # (run name, steps, train loss)
    last_at: dict[str, int | None] = field(default_factory=dict)  # field -> the step of its latest value


class PlotColumn:
    """One series for the whole-run plot in at most `cap` points (see the module docstring). Values
    that are not finite are left out, as `downsample` leaves them out of a plot."""

    def __init__(self, cap: int = PLOT_POINTS, tail: int = TAIL_POINTS):
        self.cap, self.tail = cap, tail
        self.block = 1  # consecutive points each summary block stands for
        self.xs, self.ys = array("d"), array("d")  # the summary of the complete blocks, in order
        self._ids = array("q")  # the block each summary point belongs to
        self._blocks = 0
        self._px: list = []  # the block being filled
        self._py: list[float] = []
        self.tail_xs, self.tail_ys = array("d"), array("d")  # the last points, exact (between tail and 2 x tail)
        self.count = 0  # finite points added

    def extend(self, xs: list, ys: list[float]) -> None:
        if not math.isfinite(sum(ys)):  # one C-level sum; the filter only when something is not finite
            keep = [i for i, y in enumerate(ys) if math.isfinite(y)]
            xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
        if not ys:
            return
        self.count += len(ys)
        self.tail_xs.extend(xs)
        self.tail_ys.extend(ys)
        if len(self.tail_ys) > 2 * self.tail:
            del self.tail_xs[: -self.tail], self.tail_ys[: -self.tail]
        px, py, b = self._px, self._py, self.block
        px.extend(xs)
        py.extend(ys)
        full = len(py) // b * b
        for a in range(0, full, b):
            self._summarise(px[a : a + b], py[a : a + b], self._blocks)
            self._blocks += 1
        del px[:full], py[:full]
        while len(self.ys) > self.cap:
            self._coarsen()

    def _summarise(self, xs: list, ys: list[float], block: int) -> None:
        """Append the min and the max of one block, in the order they came."""
        lo, hi = ys.index(min(ys)), ys.index(max(ys))
        for i in sorted({lo, hi}):
            self.xs.append(xs[i])
            self.ys.append(ys[i])
            self._ids.append(block)

    def _coarsen(self) -> None:
        """Double the block: each pair of blocks becomes one, its min and max."""
        xs, ys, ids = self.xs, self.ys, self._ids
        self.xs, self.ys, self._ids = array("d"), array("d"), array("q")
        start = 0
        for end in range(1, len(ids) + 1):
            if end == len(ids) or ids[end] // 2 != ids[start] // 2:
                self._summarise(xs[start:end].tolist(), ys[start:end].tolist(), ids[start] // 2)
                start = end
        self.block *= 2
        self._blocks = (self._blocks + 1) // 2  # an odd count: the last block stays closed, standing for fewer points

    def points(self) -> tuple[list, list[float]]:
        """Every point kept for the whole run, in order: the summary, then the block being filled."""
        return self.xs.tolist() + self._px, self.ys.tolist() + self._py

    def series(self, width: int, from_step: float | None = None) -> tuple[list, list[float]]:
        """Downsampled to `width` buckets (min and max of each); with `from_step`, only the points from
        that step on (steps are in order within a log), exact while the tail reaches back that far."""
        if from_step is not None:
            exact = self.count == len(self.tail_ys) or (len(self.tail_xs) > 0 and self.tail_xs[0] <= from_step)
            xs, ys = (self.tail_xs.tolist(), self.tail_ys.tolist()) if exact else self.points()
            start = bisect_left(xs, from_step)
            return downsample(xs[start:], ys[start:], width)
        return downsample(*self.points(), width)


class CurveStore:
    """One metrics log as the Loss pane shows and judges it, in bounded memory (see the module
    docstring); owned by the thread that reads the log."""

    def __init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        names = (*_FIELDS, *(_ema_name(w) for w in EMA_CHOICES if w))
        self.plots = {name: PlotColumn() for name in names}
        self.sample = CurveSample()
        self.n_points = 0
        self.first_step: int | None = None
        self.last_step: int | None = None
        self.last: dict[str, float | None] = {name: None for name in _FIELDS}
        self.last_at: dict[str, int | None] = {name: None for name in _FIELDS}
        self.last_grad_norm: float | None = None
        self._ema = {w: (0.0, 0) for w in EMA_CHOICES if w}  # weight -> (raw EMA, finite points seen)

    def extend(self, points: list[MetricPoint]) -> None:
        if not points:
            return
        self.sample.add_points(points)
        for name in _FIELDS:
            pairs = [(p.step, v) for p in points if (v := getattr(p, name)) is not None]
            if not pairs:
                continue
            xs, ys = [s for s, _ in pairs], [y for _, y in pairs]
            self.plots[name].extend(xs, ys)
            self.last[name], self.last_at[name] = ys[-1], int(xs[-1])
            if name == "train_loss":
                self._extend_ema(xs, ys)
        self.n_points += len(points)
        if self.first_step is None:
            self.first_step = points[0].step
        self.last_step = points[-1].step
        self.last_grad_norm = points[-1].grad_norm

    def _extend_ema(self, xs: list, ys: list[float]) -> None:
        """The smoothed train loss at each weight, debiased like Adam's moments (TensorBoard's
        smoothing): the first points are not pulled to 0; a non-finite loss is skipped."""
        finite = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)] if not math.isfinite(sum(ys)) else None
        fx, fy = (xs, ys) if finite is None else ([x for x, _ in finite], [y for _, y in finite])
        if not fy:
            return
        for w, (raw, n) in self._ema.items():

            def step(r: float, y: float, w: float = w) -> float:
                return w * r + (1 - w) * y

            raws = list(accumulate(fy, step, initial=raw))[1:]
            smooth = [r / (1 - w ** (n + i)) for i, r in enumerate(raws, start=1)] if w**n > 1e-17 else raws
            self.plots[_ema_name(w)].extend(fx, smooth)
            self._ema[w] = (raws[-1], n + len(fy))

    def series(self, name: str, width: int, from_step: float | None = None) -> tuple[list, list]:
        """One field downsampled to `width` buckets (min and max of each); with `from_step`, only the
        points from that step on."""
        return self.plots[name].series(width, from_step)

    def snapshot(self, view: LossView | int, bad_lines: int = 0) -> CurveSnapshot:
        """The view's series (an int is a plain view of that width)."""
        if isinstance(view, int):
            view = LossView(width=view)
        width = max(1, view.width)
        from_step = None
        if view.last_steps and self.last_step is not None:
            from_step = self.last_step - view.last_steps
        series = {name: self.series(name, width, from_step) for name in _FIELDS}
        smooth: tuple[list, list] = ([], [])
        if view.ema and _ema_name(view.ema) in self.plots:
            smooth = self.series(_ema_name(view.ema), width, from_step)
        return CurveSnapshot(
            series,
            self.n_points,
            self.last_step,
            self.first_step,
            dict(self.last),
            bad_lines,
            view,
            smooth,
            last_at=dict(self.last_at),
        )

    def columns(self) -> CurveColumns:
        """The curve so far as a diagnosis reads it (a copy: reading goes on meanwhile)."""
        return CurveColumns(tuple(self.sample.points()), self.sample.note())

    def points(self) -> list[MetricPoint]:
        """MetricPoints for `curve_rules.diagnose` (one per step; a later line adds to its step)."""
        return self.columns().points()


@dataclass(frozen=True)
class CurveColumns:
    """The store's curve at one moment: what a diagnosis of the curve so far reads."""

    merged: tuple[MetricPoint, ...]  # one per step, in step order (a bounded sample of a long log)
    note: str | None = None  # how it was downsampled, when it was

    def points(self) -> list[MetricPoint]:
        """MetricPoints for `curve_rules.diagnose` (one per step; a later line adds to its step)."""
        return list(self.merged)


def _ema_name(weight: float) -> str:
    return f"ema {weight:g}"


def downsample(xs: Sequence, ys: Sequence[float], width: int) -> tuple[list, list[float]]:
    """At most 2*width points for a plot `width` columns wide: per bucket of consecutive points,
    its min and its max in their original order, so spikes and dips survive. Non-finite y values
    are dropped (a plot cannot draw them; `diagnose` reports them). O(n), mostly in C."""
    if width < 1:
        raise ValueError(f"width must be >= 1; found {width}")
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length: {len(xs)} != {len(ys)}")
    xs, ys = list(xs), list(ys)
    if not math.isfinite(sum(ys)):  # cheap test; only then the slow filter
        keep = [i for i, y in enumerate(ys) if math.isfinite(y)]
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    n = len(ys)
    if n <= 2 * width:
        return xs, ys
    out_x, out_y = [], []
    for b in range(width):
        a, z = b * n // width, (b + 1) * n // width
        seg = ys[a:z]
        lo, hi = min(seg), max(seg)
        i_lo, i_hi = a + seg.index(lo), a + seg.index(hi)
        for i in sorted({i_lo, i_hi}):
            out_x.append(xs[i])
            out_y.append(ys[i])
    return out_x, out_y
