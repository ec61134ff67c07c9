"""The plot widget that draws a loss curve: a `CurveSnapshot` (`minigpt_tui.curve_store`, already
downsampled to the plot's width) as traces, with step ticks a person reads. No torch.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from rich.text import Text
from textual.events import Resize
from textual.message import Message
from textual_plotext import PlotextPlot

from minigpt_tui.curve_store import CurveSnapshot, LossView

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


def _outside_zoom(level: float, traces: list[Trace]) -> str | None:
    """ "above" or "below" when `level` lies outside the losses drawn on the left axis (with a
    tenth of their span as margin), else None."""
    ys = [y for t in traces if not t.right for y in t.ys]
    if not ys:
        return None
    lo, hi = min(ys), max(ys)
    margin = (hi - lo) / 10 or abs(hi) / 10
    if level > hi + margin:
        return "above"
    if level < lo - margin:
        return "below"
    return None


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
            where = _outside_zoom(self.baseline, traces) if snap.view.last_steps else None
            if where is None:
                self.hline = self.baseline
                title = f"{title} · red: log V {self.baseline:.2f}"
            else:  # drawn, the line would stretch the y axis and squash the zoomed detail
                title = f"{title} · log V {self.baseline:.2f} {where} the view"
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
