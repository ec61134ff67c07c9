"""The Loss pane's curve as data (`minigpt_tui.curve_store`): bounded in memory however long the
log it follows, with the plot's spikes, the zoom's last steps and the smoothed curve still exact."""

from __future__ import annotations

import math
import random

from minigpt.logs.metrics import MetricPoint
from minigpt_tui.curve_store import PLOT_POINTS, TAIL_POINTS, CurveStore, LossView


def _feed(store: CurveStore, n: int, spike_at: int | None = None, chunk: int = 4096) -> None:
    """`n` train lines (an evaluation every 50 steps) in the follower's chunks."""
    rng = random.Random(0)
    for start in range(1, n + 1, chunk):
        store.extend(
            [
                MetricPoint(
                    s,
                    train_loss=50.0 if s == spike_at else 2 + 2 / (1 + s / 1000) + rng.gauss(0, 0.01),
                    val_loss=2.1 if s % 50 == 0 else None,
                    lr=3e-4,
                )
                for s in range(start, min(start + chunk, n + 1))
            ]
        )


def test_a_long_log_is_held_in_bounded_columns_with_its_spike_drawn():
    # GIVEN 100,000 lines with one spike, fed as the follower feeds them
    store = CurveStore()
    _feed(store, 100_000, spike_at=67_891)
    # THEN each plotted series holds at most its cap (plus the block being filled) and a bounded tail
    for column in store.plots.values():
        xs, _ = column.points()
        assert len(xs) <= PLOT_POINTS + column.block and len(column.tail_ys) <= 2 * TAIL_POINTS
    assert store.sample.kept() < 60_000 and store.sample.thinned
    assert "judged a downsample" in (store.columns().note or "")  # the pane's verdict says so
    # AND the whole-run plot still spans the run and shows the spike
    xs, ys = store.snapshot(LossView(width=100)).series["train_loss"]
    assert max(ys) == 50.0 and xs[ys.index(50.0)] == 67_891
    assert xs[0] == 1 and xs[-1] > 99_000
    assert store.n_points == 100_000 and store.last_step == 100_000


def test_the_zoom_and_the_smoothed_curve_of_a_long_log_are_exact():
    # GIVEN a log longer than what the whole-run plot keeps
    store = CurveStore()
    _feed(store, 60_000)
    rng = random.Random(0)
    ys = [2 + 2 / (1 + s / 1000) + rng.gauss(0, 0.01) for s in range(1, 60_001)]
    # WHEN zoomed on the last 500 steps, smoothed with weight 0.9, on a plot wide enough for each point
    snap = store.snapshot(LossView(width=300, last_steps=500, ema=0.9))
    # THEN the zoom is the exact last points
    assert snap.series["train_loss"] == (list(range(59_500, 60_001)), ys[59_499:])
    # AND the smoothed curve is an EMA over every point, not only over those kept
    raw, ema = 0.0, []
    for y in ys:
        raw = 0.9 * raw + 0.1 * y
        ema.append(raw)
    assert snap.smooth[0] == list(range(59_500, 60_001))
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(snap.smooth[1], ema[59_499:]))
