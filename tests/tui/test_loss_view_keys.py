"""The Loss pane draws only what the log holds, in every view the keys `l m z p v` make (on empty,
short, huge and growing logs), with whole steps on its axis; its words give one number per fact,
and a run that stopped is not called growing."""

from __future__ import annotations

import json
import math
import random
import re
from bisect import bisect_left

import pytest
from textual.widgets import Static

from minigpt.io.lock import acquire
from minigpt.logs.curve import CurveDiagnosis
from minigpt.logs.metrics import MetricPoint
from minigpt_tui.curve_store import CurveStore, LossView
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.panes.loss_text import diagnosis_text
from minigpt_tui.widgets.loss_plot import LossPlot, step_labels, step_ticks
from tests.waiting import wait_until

from ._pane_harness import PaneHarness
from .conftest import rendered
from .test_loss_pane import _lines, _workspace_with_metrics

KEYS = "lmzpv"
# every ordered pair of the keys comes once (a de Bruijn sequence), then the first key again
EVERY_PAIR = "llmlzlplvmmzmpmvzzpzvppvvl"


def _flat_noisy(n: int, seed: int = 0) -> list[tuple[int, float]]:
    """A run that learns for ~100 steps and then stays level at 1.92 with noise and rare dips."""
    rng = random.Random(seed)
    out = []
    for step in range(1, n + 1):
        y = 1.92 + 2.2 * math.exp(-step / 30) + rng.gauss(0, 0.12)
        out.append((step, y - 0.5 if rng.random() < 0.01 else y))
    return out


def _interpolate(xs: list, ys: list, x: float) -> float:
    i = max(1, min(len(xs) - 1, bisect_left(xs, x)))
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


@pytest.mark.parametrize("n", [600, 5000, 60_000])
@pytest.mark.parametrize("width", [39, 78])
def test_a_flat_noisy_log_is_drawn_inside_its_band(n, width):
    # GIVEN a level, noisy log held by the store as the follower holds it
    data = _flat_noisy(n)
    store = CurveStore()
    store.extend([MetricPoint(s, train_loss=y) for s, y in data])
    # WHEN it is downsampled to the plot's width
    xs, ys = store.snapshot(LossView(width=width)).series["train_loss"]
    assert 0 < len(xs) <= 2 * width
    # THEN at every step the line drawn through the points lies between the lowest and the highest
    # loss logged near that step (a few buckets either side): it never draws a trend the data has not
    near = 4 * math.ceil(n / width)
    steps, losses = [s for s, _ in data], [y for _, y in data]
    for k in range(0, n, max(1, n // 500)):
        step = steps[k]
        if not xs[0] <= step <= xs[-1]:
            continue
        window = losses[max(0, k - near) : k + near + 1]
        drawn = _interpolate(xs, ys, step)
        assert min(window) - 1e-9 <= drawn <= max(window) + 1e-9, (step, drawn, min(window), max(window))


def test_step_ticks_are_whole_round_steps_that_fit_side_by_side():
    assert step_ticks(1, 600, 6) == [100, 200, 300, 400, 500, 600]
    assert step_ticks(10, 200, 6) == [50, 100, 150, 200]
    assert step_ticks(7, 7, 6) == [7]
    assert step_ticks(0.5, 3.5, 6) == [1, 2, 3]
    assert step_labels(step_ticks(1, 2_000_000, 5)) == ["500k", "1M", "1.5M", "2M"]
    for lo, hi, most in ((1, 1125, 7), (3, 99_999, 3), (250, 251, 2)):
        ticks = step_ticks(lo, hi, most)
        assert 1 <= len(ticks) <= most and all(isinstance(t, int) and lo <= t <= hi for t in ticks)


def test_the_key_sequence_holds_every_ordered_pair_of_keys():
    assert {EVERY_PAIR[i : i + 2] for i in range(len(EVERY_PAIR) - 1)} == {a + b for a in KEYS for b in KEYS}


def _write_log(ws, kind: str) -> None:
    if kind == "empty":
        ws.metrics.write_text("")
    elif kind == "three points":
        ws.metrics.write_text(_lines(1, 4, val_every=2))
    elif kind == "huge":  # 100k points, level and noisy (string formatting: json.dumps per line is slower)
        ws.metrics.write_text(
            "".join(
                f'{{"step": {s}, "train_loss": {1.9 + ((s * 7919) % 13) / 100:.4f}, "lr": 0.001'
                + (f', "val_loss": {1.95:.4f}}}\n' if s % 1000 == 0 else "}\n")
                for s in range(1, 100_001)
            )
        )
    else:  # growing: the test appends while it presses keys
        ws.metrics.write_text(_lines(1, 51))
    if kind != "empty":
        old = ws.root / "previous" / "20260101-120000" / "logs" / "metrics.jsonl"
        old.parent.mkdir(parents=True)
        old.write_text(_lines(1, 201))
        ws.samples.write_text(json.dumps({"step": 0, "prompt": "The ", "text": "Zq8#k"}) + "\n")


def _axis_labels(plot: LossPlot) -> str:
    """The step labels under the plot's frame (the line after its bottom edge)."""
    lines = plot.render().plain.splitlines()
    bottom = next((i for i, line in enumerate(lines) if "└" in line), None)
    return lines[bottom + 1] if bottom is not None and bottom + 1 < len(lines) else ""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["empty", "three points", "huge", "growing"])
async def test_every_order_of_the_view_keys_draws_or_says_why(tmp_path, monkeypatch, kind):
    monkeypatch.setattr(LossPane, "POLL_S", 0.02)  # the follower and the plot's timer, both quicker
    monkeypatch.setattr(LossPlot, "REDRAW_S", 0.02)
    ws = _workspace_with_metrics(tmp_path)
    _write_log(ws, kind)
    expected = {"empty": 0, "three points": 3, "huge": 100_000, "growing": 50}[kind]
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: pane.initial_load_s is not None and pane.points_count == expected)
        pane.focus()
        step = 51
        for n, key in enumerate(EVERY_PAIR):
            await pilot.press(key)
            if kind == "growing":  # the run writes on while the keys are pressed
                with ws.metrics.open("a") as fh:
                    fh.write(_lines(step, step + 20))
                step += 20

            def drawn_as_asked() -> bool:
                width = max(10, plot.size.width)
                return (
                    pane.view.width == width
                    and plot.snapshot.view == pane.view
                    and plot.drawn == (pane.view, plot.size.width, plot.size.height)
                )

            # THEN each view is drawn at the plot's size, or the plot says why it draws nothing
            await wait_until(pilot, drawn_as_asked)
            state = (EVERY_PAIR[: n + 1], pane.view.describe())
            assert plot.render_error is None, (*state, plot.render_error)
            if plot.reason is None:
                assert plot.traces, state
                labels = _axis_labels(plot)
                assert labels.strip() and not re.search(r"\d\.\d", labels), (*state, labels)  # whole steps
            else:
                assert kind == "empty" and plot.reason in plot.render().plain, (*state, plot.reason)


async def test_the_status_line_and_the_verdict_give_one_value_per_fact(tmp_path):
    # GIVEN a finished log whose last evaluation came 10 steps before its last step
    ws = _workspace_with_metrics(tmp_path, _lines(1, 611))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 610 and pane.diagnosis is not None)
        status = rendered(pane.query_one("#loss-status", Static))
        verdict = " ".join(rendered(pane.query_one("#loss-diagnosis", Static)).split())
        values = pane.diagnosis.values
        train, val = f"{values['last_train_loss']:.3f}", f"{values['last_val_loss']:.3f}"
        # THEN the last train loss reads the same in both, and the val loss names the step it is from
        assert f"train last {train} " in status and f"last {train} " in verdict, (status, verdict)
        assert f"val {val} (step 600)" in status, status
        assert not verdict.startswith("curve at step"), verdict  # the verdict read the status line's step


def test_a_verdict_from_an_earlier_reading_names_its_step():
    store = CurveStore()
    store.extend([MetricPoint(s, train_loss=2.0) for s in range(1, 601)])
    snap = store.snapshot(LossView())
    verdict = CurveDiagnosis("plateau", "plateau: last 2.726", values={"last_step": 450})
    # the status line shows step 600: the verdict's "last 2.726" is the last loss at step 450
    assert str(diagnosis_text(verdict, snap)).startswith("curve at step 450 !! plateau: last 2.726")
    same = CurveDiagnosis("plateau", "plateau: last 2.000", values={"last_step": 600})
    assert str(diagnosis_text(same, snap)).startswith("curve !! plateau")


@pytest.mark.slow
async def test_a_log_read_whole_or_left_by_its_run_is_not_called_growing(tmp_path):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)

        def status() -> str:
            return rendered(pane.query_one("#loss-status", Static))

        # GIVEN a log read whole at start: nobody writes it
        await wait_until(pilot, lambda: pane.points_count == 100 and "step 100" in status())
        assert "idle, following" in status() and "growing" not in status(), status()
        # WHEN a run holding the workspace lock writes more, then stops and lets the lock go
        with acquire(ws.root, "train"):
            with ws.metrics.open("a") as fh:
                fh.write(_lines(101, 121))
            await wait_until(pilot, lambda: "training in progress" in status() and pane.points_count == 120)
        # THEN the pane says the run ended, not that the log is growing
        await wait_until(pilot, lambda: "training in progress" not in status())
        assert "run ended, following" in status() and "growing" not in status(), status()
        # AND lines that come later, with no lock, are growth again (written on until the pane says so)
        steps = iter(range(121, 10_000))

        def grows() -> bool:
            step = next(steps)
            with ws.metrics.open("a") as fh:
                fh.write(_lines(step, step + 1))
            return "log growing" in status()

        await wait_until(pilot, grows)
