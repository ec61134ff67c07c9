"""A loss curve store that holds a million points cheaply, and the plot widget that draws it.

`CurveStore` keeps each series as two `array('d')` columns (16 bytes a point, not a ~300-byte
`MetricPoint`), and hands out `CurveSnapshot`s already downsampled to the plot's width, so the
UI thread only ever plots a few hundred points. What to show (width, log scale, smoothing, zoom,
earlier runs) is a `LossView`, an immutable value the UI thread replaces and the reading thread
only reads. Pure Python (no torch).
"""

from __future__ import annotations

import itertools
import math
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field

from rich.text import Text
from textual.events import Resize
from textual.message import Message
from textual_plotext import PlotextPlot

from minigpt.logs.metrics import MetricPoint, downsample

_FIELDS = ("train_loss", "val_loss", "lr")
EMA_CHOICES = (0.0, 0.6, 0.9, 0.98)  # `m` cycles through them; 0 = raw
ZOOM_CHOICES = (None, 2000, 500, 100)  # `z` cycles: all steps, then the last N


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
    last: dict[str, float | None] = field(default_factory=dict)  # field -> latest value
    bad_lines: int = 0
    view: LossView = field(default_factory=LossView)
    smooth: tuple[list, list] = ([], [])  # EMA of the train loss (view.ema), downsampled
    previous: list[tuple[str, list, list]] = field(default_factory=list)  # (run name, steps, train loss)
    last_at: dict[str, int | None] = field(default_factory=dict)  # field -> the step of its latest value


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
        self.last_at: dict[str, int | None] = {name: None for name in _FIELDS}
        self.last_grad_norm: float | None = None
        self._ema_weight = 0.0
        self._ema = array("d")  # debiased EMA of the train loss, aligned with its column
        self._ema_raw, self._ema_n = 0.0, 0

    def set_ema(self, weight: float) -> None:
        """Smooth the train loss with this weight of the past (recomputed only when it changes)."""
        if weight != self._ema_weight:
            self._ema_weight = weight
            self._ema, self._ema_raw, self._ema_n = array("d"), 0.0, 0
            self._extend_ema(0)

    def _extend_ema(self, start: int) -> None:
        # debiased like Adam's moments (TensorBoard's smoothing): the first points are not pulled to 0
        w, ys, out = self._ema_weight, self.cols["train_loss"][1], self._ema
        if not w:
            return
        raw, n = self._ema_raw, self._ema_n
        for y in ys[start:]:
            if math.isfinite(y):
                raw, n = w * raw + (1 - w) * y, n + 1
            out.append(raw / (1 - w**n) if n else math.nan)
        self._ema_raw, self._ema_n = raw, n

    def extend(self, points: list[MetricPoint]) -> None:
        (tx, ty), (vx, vy), (lx, ly) = (self.cols[name] for name in _FIELDS)
        n_train = len(ty)
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
            self.last_at[name] = int(xs[-1]) if len(xs) else None
            self._summarise(name)
        self._extend_ema(n_train)
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

    def series(self, name: str, width: int, from_step: float | None = None) -> tuple[list, list]:
        """One field downsampled to `width` buckets (min and max of each), from the block summary
        plus the points after it once a bucket spans a block; the same as `metrics_log.downsample`
        up to where bucket edges fall. With `from_step`, only the points from that step on (steps
        are in order within a log)."""
        xs, ys = self.cols[name]
        if from_step is not None:
            start = bisect_left(xs, from_step)
            return downsample(xs[start:], ys[start:], width)
        sx, sy = self._summary[name]
        done = self._summarised[name]
        # a block wider than a bucket would stand for its stretch with two points and the plot would
        # draw a straight line between them (a trend the data does not have): raw points until every
        # bucket holds a block or more
        if len(xs) < self.BLOCK * width or not done:
            return downsample(xs, ys, width)
        return downsample(sx.tolist() + xs[done:].tolist(), sy.tolist() + ys[done:].tolist(), width)

    def snapshot(self, view: LossView | int, bad_lines: int = 0) -> CurveSnapshot:
        """The view's series (an int is a plain view of that width)."""
        if isinstance(view, int):
            view = LossView(width=view)
        width = max(1, view.width)
        from_step = None
        if view.last_steps and self.last_step is not None:
            from_step = self.last_step - view.last_steps
        series = {name: self.series(name, width, from_step) for name in self.cols}
        smooth: tuple[list, list] = ([], [])
        if view.ema:
            self.set_ema(view.ema)
            xs = self.cols["train_loss"][0]
            start = 0 if from_step is None else bisect_left(xs, from_step)
            smooth = downsample(xs[start:], self._ema[start:], width)
        return CurveSnapshot(
            series, self.n_points, self.last_step, dict(self.last), bad_lines, view, smooth, last_at=dict(self.last_at)
        )

    def columns(self) -> CurveColumns:
        """A copy of the columns (a memcpy each), to diagnose on another thread."""
        cols = {name: (array("d", xs), array("d", ys)) for name, (xs, ys) in self.cols.items()}
        return CurveColumns(cols, self.last_grad_norm)

    def points(self) -> list[MetricPoint]:
        """MetricPoints rebuilt for `curve_rules.diagnose` (one per step; the last line of a step wins)."""
        return self.columns().points()


@dataclass(frozen=True)
class CurveColumns:
    """The store's columns at one moment: what a diagnosis of the curve so far reads."""

    cols: dict[str, tuple[array, array]]
    last_grad_norm: float | None

    def points(self) -> list[MetricPoint]:
        """MetricPoints for `curve_rules.diagnose` (one per step; the last line of a step wins)."""
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


PREVIOUS_COLORS = ("gray", "magenta", "yellow")
TICK_COLUMNS = 12  # about one step label per this many columns of plot


def step_ticks(lo: float, hi: float, most: int) -> list[int]:
    """At most `most` (2 or more) round whole steps from `lo` to `hi`, 1, 2 or 5 times a power of
    ten apart: steps are integers, a tick at step 57.5 names a step that never ran."""
    first, last = math.ceil(lo), math.floor(hi)
    if first > last:
        return []
    most = max(2, most)
    for power in itertools.count():
        for size in (10**power, 2 * 10**power, 5 * 10**power):
            start = -(-first // size) * size  # the first multiple of size at or after `first`
            if (last - start) // size + 1 <= most:
                return list(range(start, last + 1, size))
    raise AssertionError("unreachable: a size past the span leaves one tick or none")


def step_labels(ticks: list[int]) -> list[str]:
    """Tick labels short enough to sit side by side: 200k, 1.5M once every tick is whole thousands."""
    if not ticks or max(ticks) < 10_000 or any(t % 1000 for t in ticks):
        return [str(t) for t in ticks]
    return [f"{t / 1e6:g}M" if abs(t) >= 1_000_000 else f"{t // 1000}k" if t else "0" for t in ticks]


@dataclass(frozen=True)
class Trace:
    """One series as the plot draws it."""

    xs: list
    ys: list
    label: str
    color: str
    marker: str = "braille"
    scatter: bool = False  # points, not a line through them
    right: bool = False  # on the right-hand y axis (the learning rate)


class LossPlot(PlotextPlot):
    """Train loss (raw, and its EMA when smoothing), validation losses as points, the log(V)
    baseline, the learning rate on the right axis, earlier runs in grey. Keeps its (downsampled)
    data and replots on a 4 Hz timer only when new data arrived (textual-plotext#11: clear_data,
    plot, refresh). With nothing to draw it says why in the plot's place (`reason`)."""

    REDRAW_S = 0.25

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.snapshot = CurveSnapshot()
        self.baseline: float | None = None
        self.stale = False  # the data stopped updating: the title says so
        self.render_error: str | None = None  # the last drawing failure (plotext's), shown in its place
        self.replots = 0  # how many times the plot was rebuilt (tests and the redraw-rate figure)
        self.title_text = ""  # the title last drawn
        self.traces: list[Trace] = []  # what the next render draws
        self.reason: str | None = "no points in the metrics log yet"  # why nothing is drawn (None: drawn)
        self.drawn: tuple[LossView, int, int] | None = None  # (view, width, height) of the last render
        self.hline: float | None = None  # the baseline, drawn with the run's own losses
        self._dirty = False

    @dataclass
    class WidthChanged(Message):
        """The plot's width changed: the series are downsampled to it."""

        width: int

    def on_mount(self) -> None:
        super().on_mount()
        self.plt.xlabel("step")
        self.set_interval(self.REDRAW_S, self._redraw_if_dirty)

    def on_resize(self, event: Resize) -> None:
        self.post_message(self.WidthChanged(event.size.width))

    def show(self, snapshot: CurveSnapshot | None = None, baseline: float | None = None, stale: bool = False) -> None:
        """Keep new data; the next timer tick draws it."""
        if snapshot is not None:
            self.snapshot = snapshot
        if baseline is not None:
            self.baseline = baseline
        self._dirty = self._dirty or snapshot is not None or stale != self.stale
        self.stale = stale

    def plotted(self, name: str) -> tuple[list, list]:
        return self.snapshot.series.get(name, ([], []))

    def _redraw_if_dirty(self) -> None:
        if self._dirty and self.region.area > 0:  # in a hidden tab: drawn once shown
            self.replot()

    def replot(self) -> None:
        """Turn the kept snapshot into traces (on a log axis, only y > 0) and redraw."""
        self._dirty = False
        self.replots += 1
        snap = self.snapshot
        log_y = snap.view.log_y

        def positive(xs: list, ys: list) -> tuple[list, list]:  # a log axis cannot place y <= 0
            if not log_y:
                return xs, ys
            keep = [i for i, y in enumerate(ys) if y > 0]
            return [xs[i] for i in keep], [ys[i] for i in keep]

        traces = []
        for (name, xs, ys), color in zip(snap.previous, PREVIOUS_COLORS):
            xs, ys = positive(xs, ys)
            if xs:
                traces.append(Trace(xs, ys, f"prev {name[-6:]}", color))
        tx, ty = positive(*self.plotted("train_loss"))
        sx, sy = positive(*snap.smooth)
        if tx:
            traces.append(Trace(tx, ty, "train", "gray" if sx else "cyan"))
        if sx:  # smoothing is the user's choice (`m`), and named as such in the legend
            traces.append(Trace(sx, sy, f"EMA {snap.view.ema:g}", "cyan"))
        vx, vy = positive(*self.plotted("val_loss"))
        if vx:  # evaluations are points in time, not a line through two of them
            traces.append(Trace(vx, vy, "val", "orange", marker="x", scatter=True))
        lx, ly = self.plotted("lr")
        if lx and (tx or vx):
            traces.append(Trace(lx, ly, "lr (right)", "green", marker="dot", right=True))
        self.traces = traces
        self.reason = None if traces else self._why_nothing(log_y)
        # the point count lives here, drawn with the points (in the status line it ran ahead of the plot)
        title = f"loss · {snap.n_points:,} pts"
        self.hline = None
        if self.baseline is not None and math.isfinite(self.baseline) and (tx or vx):
            self.hline = self.baseline
            title = f"{title} · red: log V {self.baseline:.2f}"
        if self.stale:
            title = f"NOT UPDATING · {title}"
        self.title_text = title
        self.refresh()

    def _why_nothing(self, log_y: bool) -> str:
        snap = self.snapshot
        if not snap.n_points:
            return "no points in the metrics log yet"
        losses = [*self.plotted("train_loss")[1], *self.plotted("val_loss")[1]]
        if log_y and losses:
            return "log scale: no loss above 0 to draw (l: linear scale)"
        return "no finite train or val loss in the metrics log yet"

    def render(self):
        self.drawn = (self.snapshot.view, self.size.width, self.size.height)
        if self.reason is not None:
            self.render_error = None
            return Text(f"{self.title_text}\n{self.reason}" if self.title_text else self.reason, style="dim")
        self._load()
        try:
            drawn = super().render()
        except (ValueError, IndexError, ZeroDivisionError) as exc:
            # plotext fails on some data at some sizes: say so where the plot goes, never crash the UI
            self.render_error = f"{type(exc).__name__}: {exc}"
            return Text(f"cannot draw the plot here ({self.render_error})", style="yellow")
        self.render_error = None
        return drawn

    def _load(self) -> None:
        """Hand plotext the traces afresh for every build: its build applies the log scale to the
        data it holds, in place, so a second build of the same data (a resize, the samples view
        opening) would draw log(log y) and fail."""
        plt, traces = self.plt, self.traces
        plt.clear_data()
        plt.yscale("log" if self.snapshot.view.log_y else "linear", yside="left")
        plt.yscale("linear", yside="right")  # the LR keeps its own linear axis
        for t in traces:
            side = "right" if t.right else "left"
            draw = plt.scatter if t.scatter else plt.plot
            draw(t.xs, t.ys, label=t.label, marker=t.marker, color=t.color, yside=side)
        lo = min(min(t.xs) for t in traces)
        hi = max(max(t.xs) for t in traces)
        if lo == hi:  # one step: a span around it (plotext's own would run from half the step to 1.5x)
            lo, hi = lo - 1, hi + 1
        plt.xlim(lo, hi)
        ticks = step_ticks(lo, hi, self.size.width // TICK_COLUMNS)
        plt.xticks([float(t) for t in ticks], step_labels(ticks))
        if self.hline is not None:
            plt.hline(self.hline, "red")
        plt.title(self.title_text)
