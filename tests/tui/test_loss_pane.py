"""Pilot tests for the loss pane (6): tail -f of metrics.jsonl, downsampling, training subprocess."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from textual.widgets import Static

from minigpt.io.workspace import Workspace
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.panes.loss_text import diagnosis_more, diagnosis_text
from minigpt_tui.widgets.loss_plot import LossPlot
from tests.waiting import wait_until

from ._pane_harness import PaneHarness


def _lines(start: int, stop: int, *, val_every: int = 50) -> str:
    out = []
    for step in range(start, stop):
        rec = {"step": step, "train_loss": 4.0 * math.exp(-step / 300) + 1.0, "lr": 1e-3}
        if step % val_every == 0:
            rec["val_loss"] = rec["train_loss"] + 0.1
        out.append(json.dumps(rec))
    return "".join(line + "\n" for line in out)


def _workspace_with_metrics(tmp_path: Path, text: str = "") -> Workspace:
    ws = Workspace(tmp_path / "ws")
    ws.metrics.parent.mkdir(parents=True)
    ws.tokenizer.parent.mkdir(parents=True)
    ws.tokenizer.write_text(json.dumps({"chars": [chr(c) for c in range(32, 32 + 65)]}))  # V = 65
    ws.metrics.write_text(text)
    return ws


async def test_follows_a_growing_metrics_file_and_resets_when_truncated(tmp_path):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: pane.points_count == 100 and plot.replots > 0)
        assert pane.baseline == pytest.approx(math.log(65))
        first_x = list(plot.plotted("train_loss")[0])
        assert first_x[-1] == 100

        # WHEN the run appends while we watch (a partial last line waits for its newline)
        with open(ws.metrics, "a") as f:
            f.write(_lines(101, 301))
            f.write('{"step": 301, "train_lo')
        await wait_until(pilot, lambda: pane.points_count == 300)
        replots = plot.replots
        await wait_until(pilot, lambda: plot.plotted("train_loss")[0][-1] == 300)
        await wait_until(pilot, lambda: plot.replots > replots)
        status = str(pane.query_one("#loss-status", Static).render())
        assert "ppl" in status and "train last" in status and "step 300" in status
        assert "300 pts" in plot.title_text  # counted where the points are drawn, never ahead of them
        await wait_until(pilot, lambda: pane.diagnosis is not None)
        assert "curve" in str(pane.query_one("#loss-diagnosis", Static).render())

        # WHEN the file is truncated (a fresh run), THEN the plot starts again
        ws.metrics.write_text(_lines(1, 11))
        await wait_until(pilot, lambda: pane.resets >= 1 and pane.points_count == 10)
        await wait_until(pilot, lambda: len(plot.plotted("train_loss")[0]) == 10)


async def test_metrics_file_that_appears_later_is_picked_up(tmp_path):
    ws = _workspace_with_metrics(tmp_path)
    ws.metrics.unlink()
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        # the follower has looked at the missing log and reported: no points from a file not there
        await wait_until(pilot, lambda: pane.initial_load_s is not None, what="the follower's first report")
        assert pane.points_count == 0
        ws.metrics.write_text(_lines(1, 41))
        await wait_until(pilot, lambda: pane.points_count == 40)
        await wait_until(pilot, lambda: pane.diagnosis is not None)
        assert pane.diagnosis.shape in {"healthy", "plateau", "flat", "too_short"}


@pytest.mark.slow
async def test_a_million_line_log_loads_and_is_downsampled_to_the_plot_width(tmp_path):
    # GIVEN a 1e6-line log, written with string formatting (json.dumps per line is slower)
    ws = _workspace_with_metrics(tmp_path)
    with open(ws.metrics, "w") as f:
        for start in range(1, 1_000_001, 100_000):
            f.write(
                "".join(
                    f'{{"step": {s}, "train_loss": {1 + 3 / (1 + s / 1e4):.5f}, "lr": 0.001}}\n'
                    for s in range(start, start + 100_000)
                )
            )
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: pane.points_count == 1_000_000 and pane.initial_load_s is not None)
        await wait_until(pilot, lambda: plot.plotted("train_loss")[0][-1] > 990_000)
        xs, ys = plot.plotted("train_loss")
        assert 0 < len(xs) <= 2 * plot.size.width
        print(f"1e6-line load: {pane.initial_load_s:.2f} s")


@pytest.mark.slow  # a few seconds: the full run (CI) only
async def test_starts_and_stops_a_training_subprocess(demo_ws):
    app = PaneHarness(LossPane, demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        pane.controls.train_args = ["--preset", "debug", "--steps", "100000", "--device", "cpu"]
        demo_ws.checkpoints.mkdir(parents=True, exist_ok=True)
        demo_ws.best_checkpoint.write_bytes(b"an earlier run")
        pane.focus()
        await pilot.press("s")
        # the workspace holds a run: the pane asks before moving it to previous/
        await wait_until(pilot, lambda: not pane.controls.training and app.screen is not app.screen_stack[0])
        await pilot.press("y")
        await wait_until(pilot, lambda: pane.controls.training)
        await wait_until(pilot, lambda: any((demo_ws.root / "previous").glob("*/checkpoints/mini_gpt_best.pt")))
        pid = app.training.run.pid
        assert "RUNNING" in str(pane.query_one("#train-status", Static).render())
        # the trainer logs every 10 steps; the pane follows the file it (re)creates
        await wait_until(pilot, lambda: pane.points_count >= 2)
        grown = pane.points_count
        await wait_until(pilot, lambda: pane.points_count > grown)
        await pilot.press("x")
        await wait_until(pilot, lambda: not pane.controls.training and pane.controls.last_exit is not None)
        assert app.training.run.process.returncode is not None
        with pytest.raises(ProcessLookupError):
            import os

            os.kill(pid, 0)
        assert "stopped from here" in str(pane.query_one("#train-status", Static).render())


async def test_a_crashing_training_run_shows_its_exit_code_and_log_tail(tmp_path):
    ws = _workspace_with_metrics(tmp_path)  # no encoded data: `minigpt train` fails
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        assert pane.controls.start_training()
        await wait_until(pilot, lambda: pane.controls.last_exit is not None)
        assert pane.controls.last_exit.returncode != 0
        status = str(pane.query_one("#train-status", Static).render())
        assert "FAILED (exit code" in status and pane.controls.last_exit.log_tail


def test_ema_is_debiased_and_zoom_keeps_only_the_last_steps():
    from minigpt.logs.metrics import MetricPoint
    from minigpt_tui.curve_store import CurveStore, LossView

    store = CurveStore()
    store.extend([MetricPoint(s, train_loss=2.0 if s < 50 else 1.0) for s in range(1, 101)])
    snap = store.snapshot(LossView(width=200, ema=0.9))
    xs, ys = snap.smooth
    assert ys[0] == pytest.approx(2.0)  # not pulled towards 0 at the start
    assert ys[60] < 2.0 and ys[60] > 1.0  # lags behind the step down
    assert snap.series["train_loss"][1][60] == 1.0  # the raw series is kept too
    zoomed = store.snapshot(LossView(width=200, last_steps=10))
    assert zoomed.series["train_loss"][0] == list(range(90, 101))
    assert store.snapshot(LossView(width=200)).series["train_loss"][0][0] == 1


async def test_view_keys_zoom_smooth_log_scale_and_overlay_earlier_runs(tmp_path):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 301))
    old = ws.root / "previous" / "20260101-120000" / "logs" / "metrics.jsonl"
    old.parent.mkdir(parents=True)
    old.write_text(_lines(1, 501))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: pane.points_count == 300)
        pane.focus()
        await pilot.press("z", "z", "z")  # all -> last 2000 -> last 500 -> last 100
        await wait_until(pilot, lambda: plot.plotted("train_loss")[0][:1] == [200])
        await pilot.press("m")
        await wait_until(pilot, lambda: len(plot.snapshot.smooth[0]) > 0)
        await pilot.press("l")
        await wait_until(pilot, lambda: plot.snapshot.view.log_y)
        await pilot.press("p")
        await wait_until(pilot, lambda: [name for name, _, _ in plot.snapshot.previous] == ["20260101-120000"])
        assert plot.snapshot.previous[0][1][-1] == 500
        status = str(pane.query_one("#loss-status", Static).render())
        assert "log · EMA 0.6 · last 100 · +prev" in status
        assert plot.render_error is None, plot.render_error
        await pilot.press("p", "l", "z")  # back: no overlay, linear, all steps
        await wait_until(pilot, lambda: plot.plotted("train_loss")[0][:1] == [1] and not plot.snapshot.previous)


async def test_a_plot_that_plotext_cannot_draw_is_named_and_the_app_keeps_running(tmp_path, monkeypatch):
    from textual_plotext import PlotextPlot

    def broken_build(self):
        raise ValueError("math domain error")

    monkeypatch.setattr(PlotextPlot, "render", broken_build)
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: plot.render_error is not None and pane.points_count == 100)
        assert "math domain error" in plot.render_error
        assert app.is_running


@pytest.mark.parametrize(
    "fixture, mark",
    [("lr_1e-4", "curve OK"), ("lr_1e-2", "curve OK"), ("lr_3_noclip", "curve FAIL"), ("plateau_lr_0.2", "curve !!")],
)
def test_the_verdict_line_uses_the_checks_severity_for_each_shape(fixture, mark):
    # still_improving passes in the training_curve check: the pane must not flag it as "!!"
    import math
    from pathlib import Path

    from minigpt.logs.curve_rules import diagnose
    from minigpt.logs.metrics import read_metrics

    path = Path(__file__).resolve().parents[1] / "fixtures" / "curves" / f"{fixture}.jsonl"
    diagnosis = diagnose(list(read_metrics(path).points), baseline=math.log(103))
    assert str(diagnosis_text(diagnosis, None)).startswith(mark)


def test_the_verdict_its_cause_and_try_line_fit_80_columns_and_all_of_it_follows():
    from minigpt.logs.curve import CurveDiagnosis

    # GIVEN a verdict far longer than two lines (the issue saw 900 characters)
    summary = "; ".join(f"warm-up bump {i} at step {540 + i} rose 0.{i}2 above the trend" for i in range(20))
    diagnosis = CurveDiagnosis(
        "overfitting",
        summary,
        causes=["too little data for the model size", "too many steps", "too little regularisation"],
        fixes=["more data or a smaller model", "stop at the best val loss (mini_gpt_best.pt)", "add dropout"],
    )
    lines = str(diagnosis_text(diagnosis, None, width=76)).splitlines()
    # THEN two verdict lines, then the cause the CLI gives and what to try, each within the width
    assert len(lines) == 4 and all(len(line) <= 76 for line in lines)
    assert lines[0].startswith("curve !! warm-up bump 0") and lines[1].endswith("…")
    assert lines[1].rstrip("…").endswith("trend")  # cut at a clause, not mid-word
    assert lines[2] == "  likely: too little data for the model size; too many steps"
    assert lines[3].startswith("  try: more data or a smaller model")
    # AND all of it comes under the head, for the pane to scroll to
    more = str(diagnosis_more(diagnosis, None, width=76))
    assert all(len(line) <= 76 for line in more.splitlines())
    words = " ".join(more.split())
    assert "bump 19 at step 559 rose 0.192 above the trend" in words
    assert "too little regularisation" in words and "add dropout" in words


def test_a_verdict_cut_at_two_lines_of_characters_that_wraps_to_three_is_cut_further():
    from minigpt.logs.curve import CurveDiagnosis

    # GIVEN a verdict of long words: 2 x 40 characters of it wrap onto 4 lines of 40, one word each
    summary = " ".join(["w" * 25] * 8)
    diagnosis = CurveDiagnosis("plateau", summary, causes=["a cause"], fixes=["a fix"])
    lines = str(diagnosis_text(diagnosis, None, width=40)).splitlines()
    # THEN the verdict keeps to two rows, so the likely and try lines are the third and fourth
    assert all(len(line) <= 40 for line in lines), lines  # a line is a row: none wraps
    assert lines[2:] == ["  likely: a cause", "  try: a fix"], lines


@pytest.mark.slow
async def test_v_shows_the_samples_by_step_beside_the_plot_and_follows_new_ones(tmp_path):
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    ws.samples.write_text(
        json.dumps({"step": 0, "prompt": "The ", "text": "Zq8#k\nxW"})
        + "\n"
        + json.dumps({"step": 50, "prompt": "The ", "text": "the cat", "val_loss": 2.5})
        + "\n"
    )
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        samples = pane.query_one("#loss-samples")
        body = pane.query_one("#loss-samples-body", Static)
        assert not samples.display  # hidden until asked for: the plot keeps the width
        pane.focus()
        await pilot.press("v")
        await wait_until(pilot, lambda: "step 50  val 2.500" in str(body.render()))
        text = str(body.render())
        assert samples.display and "step 0\nThe Zq8#k⏎xW" in text and "The the cat" in text
        with ws.samples.open("a") as fh:  # the run writes its next sample
            fh.write(json.dumps({"step": 100, "prompt": "The ", "text": "the cat sat"}) + "\n")
        await wait_until(pilot, lambda: "step 100" in str(body.render()))
        await pilot.press("v")
        assert not samples.display


async def test_the_samples_view_keeps_the_newest_sample_in_sight_after_a_resize(tmp_path):
    # GIVEN a run with many samples, shown at 80x24 (scrolled to the newest)
    ws = _workspace_with_metrics(tmp_path, _lines(1, 101))
    text = "the cat sat on the mat and looked at the dog " * 3
    ws.samples.write_text("".join(json.dumps({"step": s, "prompt": "The ", "text": text}) + "\n" for s in range(30)))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        samples = pane.query_one("#loss-samples")
        pane.focus()
        await pilot.press("v")
        await wait_until(pilot, lambda: samples.max_scroll_y > 0 and samples.scroll_y == samples.max_scroll_y)
        # WHEN the terminal grows and shrinks again (the text re-wraps each time)
        for size in ((120, 40), (80, 24)):
            await pilot.resize_terminal(*size)
            await pilot.pause(0.3)
            # THEN the newest sample is still the one in sight
            await wait_until(pilot, lambda: samples.scroll_y == samples.max_scroll_y > 0)
