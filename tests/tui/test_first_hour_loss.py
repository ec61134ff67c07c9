"""The Loss and Gradients panes' view keys as a new user met them: a zoom that zooms y as well, a
key that changes nothing says why, a status line that fits 80 columns, no toast left over a pane."""

from __future__ import annotations

import math

from textual.widgets import Static

from minigpt_tui.panes.gradients import GradientsPane
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.panes.loss_text import pack_fields
from minigpt_tui.widgets.loss_plot import LossPlot
from tests.waiting import wait_until

from ._pane_harness import PaneHarness
from .conftest import record_notifications, rendered
from .test_loss_pane import _lines, _workspace_with_metrics


def _status(pane: LossPane) -> str:
    return rendered(pane.query_one("#loss-status", Static))


async def test_zoom_fits_the_y_axis_to_the_zoomed_losses_not_to_log_v(tmp_path):
    # GIVEN a 3000-step run whose loss has long been far below log V (4.17 for V = 65)
    ws = _workspace_with_metrics(tmp_path, _lines(1, 3001))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        plot = pane.query_one(LossPlot)
        await wait_until(pilot, lambda: pane.points_count == 3000 and plot.hline is not None, what="the whole run")
        assert plot.hline == math.log(65)  # the whole run: log V drawn, the first losses are above it
        # WHEN the user zooms on the last 2000 steps (losses 1.0 to 1.2)
        pane.focus()
        await pilot.press("z")
        # THEN log V is named in the title, not drawn: the y axis spans the zoomed losses only
        await wait_until(pilot, lambda: plot.snapshot.view.last_steps == 2000 and plot.replots > 1, what="the zoom")
        await wait_until(pilot, lambda: "log V 4.17 above the view" in plot.title_text, what="log V named")
        assert plot.hline is None


async def test_zoom_on_a_short_run_and_overlay_with_no_earlier_run_say_why_nothing_changed(tmp_path):
    # GIVEN a 60-step run and no earlier runs in the workspace
    ws = _workspace_with_metrics(tmp_path, _lines(1, 61))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 60, what="the run")
        pane.focus()
        # WHEN z is pressed: every zoom window (100 steps and up) would show the whole run
        await pilot.press("z")
        # THEN the status line says so, and the view stays the whole run
        await wait_until(pilot, lambda: "z: the run spans 59 steps, all of it shown" in _status(pane), what="z's note")
        assert pane.view.last_steps is None
        # WHEN p is pressed with nothing in previous/
        await pilot.press("p")
        await wait_until(pilot, lambda: "p: no earlier runs to overlay" in _status(pane), what="p's note")
        assert not pane.view.previous


async def test_the_status_line_fits_80_columns_after_l_then_v(tmp_path):
    # GIVEN a run with train, val, lr and log V in its status line, at 80 columns
    ws = _workspace_with_metrics(tmp_path, _lines(1, 301))
    app = PaneHarness(LossPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        await wait_until(pilot, lambda: pane.points_count == 300, what="the run")
        pane.focus()
        # WHEN the log scale and the samples view are turned on
        await pilot.press("l", "v")
        await wait_until(pilot, lambda: "log V 4.17" in _status(pane) and "log" in pane.view.describe(), what="l")
        # THEN no status line is cut: every field is whole, each line within the pane's width
        status = pane.query_one("#loss-status", Static)
        lines = [line.rstrip() for line in rendered(status).splitlines() if line.strip()]
        assert all(len(line) <= status.size.width for line in lines), lines


def test_fields_are_packed_whole_into_lines_of_the_width():
    fields = ["train last 1.0123 (ppl 2.75)", "val 1.1 (step 300)", "lr 1.0e-03", "log V 4.17", "log"]
    lines = pack_fields(fields, 40)
    assert all(len(line) <= 40 for line in lines) and len(lines) == 3
    assert [f for line in lines for f in line.split(" · ")] == fields  # no field split, none lost


async def test_o_without_ratios_says_so_in_the_gradients_header_not_in_a_toast(tmp_path):
    from minigpt.io.workspace import Workspace

    # GIVEN the Gradients pane with a source that has no update/weight ratios
    app = PaneHarness(GradientsPane, Workspace(tmp_path / "ws"))
    notified = record_notifications(app)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.focus()
        # WHEN o (sort by ratio) is pressed
        await pilot.press("o")
        # THEN the pane's own header says why nothing was sorted, and no toast is left to cover another pane
        header = pane.query_one("#grad-header", Static)
        await wait_until(pilot, lambda: "o: no upd/weight ratios" in rendered(header), what="o's note in the header")
        assert not notified
