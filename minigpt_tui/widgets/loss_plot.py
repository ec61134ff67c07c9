"""A loss curve store that holds a million points cheaply, and the plot widget that draws it.

`CurveStore` keeps each series as two `array('d')` columns (16 bytes a point, not a ~300-byte
`MetricPoint`), and hands out `CurveSnapshot`s already downsampled to the plot's width, so the
UI thread only ever plots a few hundred points. Pure Python (no torch).
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from textual_plotext import PlotextPlot

from minigpt.curve import MetricPoint, downsample

_FIELDS = ("train_loss", "val_loss", "lr")


@dataclass
class CurveSnapshot:
    """What the loss pane shows: series downsampled to the plot width, and the latest values."""

    series: dict[str, tuple[list, list]] = field(default_factory=dict)  # field -> (steps, values)
    n_points: int = 0  # metrics records read so far
    last_step: int | None = None
    last: dict[str, float | None] = field(default_factory=dict)  # field -> latest value
    bad_lines: int = 0


class CurveStore:
    """All points of one metrics log, column-wise; owned by the thread that reads the log."""

    def __init__(self) -> None:
        self.clear()

    BLOCK = 512  # points summarised by their min and max once complete

    def clear(self) -> None:
        self.cols = {name: (array("d"), array("d")) for name in _FIELDS}
        # per completed block of BLOCK points: its min and max (in order), so a snapshot of a
        # million points downsamples ~4000 summary points plus the raw tail, not the whole log
        self._summary = {name: (array("d"), array("d")) for name in _FIELDS}
        self._summarised = {name: 0 for name in _FIELDS}
        self.n_points = 0
        self.last_step: int | None = None
        self.last: dict[str, float | None] = {name: None for name in _FIELDS}
        self.last_grad_norm: float | None = None

    def extend(self, points: list[MetricPoint]) -> None:
        (tx, ty), (vx, vy), (lx, ly) = (self.cols[name] for name in _FIELDS)
        for p in points:  # one pass, bound methods: this loop runs a million times on a long log
            if p.train_loss is not None:
                tx.append(p.step)
                ty.append(p.train_loss)
            if p.val_loss is not None:
                vx.append(p.step)
                vy.append(p.val_loss)
            if p.lr is not None:
                lx.append(p.step)
                ly.append(p.lr)
        for name in _FIELDS:
            xs, ys = self.cols[name]
            self.last[name] = ys[-1] if len(ys) else None
            self._summarise(name)
        if points:
            self.n_points += len(points)
            self.last_step = points[-1].step
            self.last_grad_norm = points[-1].grad_norm

    def _summarise(self, name: str) -> None:
        xs, ys = self.cols[name]
        sx, sy = self._summary[name]
        done, block = self._summarised[name], self.BLOCK
        while done + block <= len(ys):
            seg = ys[done : done + block]
            if not math.isfinite(sum(seg)):  # downsample drops non-finite values: so does the summary
                keep = [i for i, y in enumerate(seg) if math.isfinite(y)]
            else:
                keep = None
            if keep is None or keep:
                vals = seg if keep is None else [seg[i] for i in keep]
                lo, hi = vals.index(min(vals)), vals.index(max(vals))
                for i in sorted({lo, hi}):
                    j = done + (i if keep is None else keep[i])
                    sx.append(xs[j])
                    sy.append(ys[j])
            done += block
        self._summarised[name] = done

    def series(self, name: str, width: int) -> tuple[list, list]:
        """One field downsampled to `width` buckets (min and max of each), from the block summary
        plus the points after it; the same as `curve.downsample` up to where bucket edges fall."""
        xs, ys = self.cols[name]
        sx, sy = self._summary[name]
        done = self._summarised[name]
        if len(xs) <= 4 * width or not done:
            return downsample(xs, ys, width)
        return downsample(sx.tolist() + xs[done:].tolist(), sy.tolist() + ys[done:].tolist(), width)

    def snapshot(self, width: int, bad_lines: int = 0) -> CurveSnapshot:
        width = max(1, width)
        series = {name: self.series(name, width) for name in self.cols}
        return CurveSnapshot(series, self.n_points, self.last_step, dict(self.last), bad_lines)

    def points(self) -> list[MetricPoint]:
        """MetricPoints rebuilt for `curve.diagnose` (one per step; the last line of a step wins)."""
        by_step: dict[int, MetricPoint] = {}
        for name in _FIELDS:
            xs, ys = self.cols[name]
            for s, v in zip(xs, ys):
                step = int(s)
                p = by_step.get(step)
                if p is None:
                    p = by_step[step] = MetricPoint(step)
                setattr(p, name, v)
        pts = [by_step[s] for s in sorted(by_step)]
        if pts:
            pts[-1].grad_norm = self.last_grad_norm
        return pts


class LossPlot(PlotextPlot):
    """Train and validation loss with the log(V) baseline. Keeps its (downsampled) data and
    replots on a 4 Hz timer only when new data arrived (textual-plotext#11: clear_data, plot,
    refresh)."""

    REDRAW_S = 0.25

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.snapshot = CurveSnapshot()
        self.baseline: float | None = None
        self.replots = 0  # how many times the plot was rebuilt (tests and the redraw-rate figure)
        self._dirty = False

    def on_mount(self) -> None:
        super().on_mount()
        self.plt.title("loss")
        self.plt.xlabel("step")
        self.set_interval(self.REDRAW_S, self._redraw_if_dirty)

    def show(self, snapshot: CurveSnapshot | None = None, baseline: float | None = None) -> None:
        """Keep new data; the next timer tick draws it."""
        if snapshot is not None:
            self.snapshot = snapshot
        if baseline is not None:
            self.baseline = baseline
        self._dirty = True

    def plotted(self, name: str) -> tuple[list, list]:
        return self.snapshot.series.get(name, ([], []))

    def _redraw_if_dirty(self) -> None:
        if self._dirty:
            self.replot()

    def replot(self) -> None:
        self._dirty = False
        self.replots += 1
        plt = self.plt
        plt.clear_data()
        tx, ty = self.plotted("train_loss")
        vx, vy = self.plotted("val_loss")
        if tx:
            plt.plot(tx, ty, label="train", marker="braille")
        if vx:
            plt.plot(vx, vy, label="val", marker="dot" if len(vx) > 1 else "x")
        if self.baseline is not None and math.isfinite(self.baseline) and (tx or vx):
            plt.hline(self.baseline, "red")
            plt.title(f"loss  (red line: log V = {self.baseline:.2f}, a uniform guess)")
        self.refresh()
