"""SVG snapshots of layouts with fixed content (no durations, no clocks): help, fault menu, the
checks pane fed fixed results, and the loss pane with the app's header and footer fed a fixed curve.
Pinned: they break on every Textual upgrade, so other versions skip."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Footer, Header

from minigpt_tui.app import MiniGPTApp, header_subtitle
from minigpt_tui.curve_store import CurveStore, LossView
from minigpt_tui.messages import CheckFinished, ChecksFinished, ChecksStarted
from minigpt_tui.panes.checks import ChecksPane
from minigpt_tui.panes.curve_follow import CurveDiagnosed, CurveUpdated
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.screens.faults import FaultMenuScreen
from minigpt_tui.widgets.loss_plot import LossPlot
from tests.waiting import wait_until

from ._pane_harness import only_on_the_pinned_textual

pytestmark = only_on_the_pinned_textual()

CSS = Path(__file__).resolve().parents[2] / "minigpt_tui" / "app.tcss"


class ScreenHost(App):
    CSS_PATH = CSS

    def __init__(self, screen_factory) -> None:
        super().__init__()
        self.screen_factory = screen_factory

    def on_mount(self) -> None:
        self.push_screen(self.screen_factory())


def fault_menu() -> FaultMenuScreen:
    from minigpt.checks import FAULTS

    return FaultMenuScreen([(f.name, f.description, f.intended) for f in FAULTS.values()], current="no_shift")


class FixedChecks(App):
    """The checks pane fed fixed results through its messages (no threads, fixed durations)."""

    CSS_PATH = CSS
    workspace = session = metrics_path = None  # minigpt_tui.host.Host: no run folder behind it

    def compose(self) -> ComposeResult:
        yield ChecksPane()

    def on_mount(self) -> None:
        from minigpt.checks import CheckResult, Report, Status

        pane = self.query_one(ChecksPane)
        results = [
            CheckResult("environment", "environment", Status.PASS, "Python 3.x, torch 2.x, device cpu"),
            CheckResult("files", "files", Status.PASS, "6 files found"),
            CheckResult(
                "batch_shift",
                "batches",
                Status.FAIL,
                "targets equal inputs: the model would learn to copy, not to predict the next token",
                values={"shape": [8, 32], "shift_invariant": False, "targets_equal_inputs": True},
                causes=["targets built as data[i:i+T] instead of data[i+1:i+T+1]"],
                fixes=["y = data[i + 1 : i + 1 + block_size]"],
                duration_s=0.01,
            ),
            CheckResult("initial_loss", "model", Status.SKIP, "skipped: batch_shift fail"),
            CheckResult("training_curve", "training", Status.WARN, "plateau: loss flat over the last 30%"),
        ]
        pane.post_message(ChecksStarted([r.id for r in results], None))
        for i, r in enumerate(results):
            pane.post_message(CheckFinished(r, i, len(results)))
        pane.post_message(ChecksFinished(Report(results=results, fault="no_shift", seconds=1.0)))


def test_fault_menu_layout(snap_compare):
    assert snap_compare(ScreenHost(fault_menu), terminal_size=(80, 24))


def test_fault_menu_scrolled_to_the_end_shows_the_last_fault_and_clear(snap_compare):
    # 80x24 holds fewer faults than there are: the list scrolls, the box stays on screen
    assert snap_compare(ScreenHost(fault_menu), terminal_size=(80, 24), press=["end"])


def test_checks_status_with_a_filter_counts_the_rows_shown(snap_compare):
    async def filter_rows(pilot):
        pane = pilot.app.query_one(ChecksPane)
        pane.table.focus()
        await pilot.press("slash", "b", "a", "t", "c", "h", "enter")
        await wait_until(
            pilot,
            lambda: pane.filter == "batch" and pane.filter_count()[0] < pane.filter_count()[1],
            what="the filter applied",
        )

    assert snap_compare(FixedChecks(), terminal_size=(80, 24), run_before=filter_rows)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_checks_pane_layout(snap_compare, size):
    async def select_failed_check(pilot):
        pane = pilot.app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=2)
        await wait_until(pilot, lambda: pane.selected_id == "batch_shift", what="batch_shift selected")

    assert snap_compare(FixedChecks(), terminal_size=size, run_before=select_failed_check)


class FixedLoss(App):
    """The app chrome (header with the judged checkpoint, footer with the app's and the pane's keys)
    around the loss pane fed a fixed curve and verdict through its messages (no threads)."""

    CSS_PATH = CSS
    TITLE = "minigpt-tui"
    BINDINGS = MiniGPTApp.BINDINGS
    check_action = MiniGPTApp.check_action  # which of its keys the footer shows
    workspace = session = metrics_path = None  # the pane follows nothing by itself (minigpt_tui.host.Host)

    def compose(self) -> ComposeResult:
        yield Header()
        yield LossPane()
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        from minigpt.logs.metrics import MetricPoint

        self.sub_title = header_subtitle(
            self.size.width, self.TITLE, None, "ckpt step 600 09:14", "cpu", "/home/ada/runs/tiny-shakespeare"
        )
        pane = self.query_one(LossPane)
        pane.metrics_path = Path("/home/ada/runs/tiny-shakespeare/logs/metrics.jsonl")
        pane.focus()
        store = CurveStore()
        store.extend(
            [
                MetricPoint(
                    s,
                    train_loss=1.5 + 2.6 * 0.993**s + 0.05 * ((s * 7919) % 13) / 13,
                    val_loss=1.6 + 2.6 * 0.993**s if s % 100 == 0 else None,
                    lr=1e-3 * min(1.0, s / 100),
                )
                for s in range(10, 610, 10)
            ]
        )
        snap = store.snapshot(LossView(width=60, ema=0.9))
        pane.post_message(CurveUpdated(snap, True, 4.17, 0, False, 0.01, None, False, False, (1, 0)))
        pane.post_message(CurveDiagnosed(self.verdict(), (1, 0), 0.01))

    @staticmethod
    def verdict():
        from minigpt.logs.curve import CurveDiagnosis

        return CurveDiagnosis(
            "still_improving",
            "val loss fell 9.1% (+- 1.2%) over the last 30% of the run; train longer; first 4.10, "
            "last 1.55 (median of the last 3: 1.56)",
            fixes=["train for more steps"],
        )


class FailingLoss(FixedLoss):
    """The same chrome and curve, judged overfitting with a verdict far longer than two lines."""

    @staticmethod
    def verdict():
        from minigpt.logs.curve import CurveDiagnosis

        return CurveDiagnosis(
            "overfitting",
            "val loss rose 12.0% from its best (1.62 at step 300) while train fell 20.1%; generalisation gap "
            "0.41 at step 600; the best checkpoint is step 300; train 1.55, val 2.03; first 4.10, last 1.55",
            causes=["too little data for the model size", "too many steps", "too little regularisation"],
            fixes=["use the best checkpoint (lowest val loss), not the last", "stop training earlier"],
        )


def test_loss_pane_verdict_cause_and_try_line_fit_80x24(snap_compare):
    async def let_the_plot_draw(pilot):
        plot = pilot.app.query_one(LossPlot)
        await wait_until(pilot, lambda: plot.replots > 0 and plot.drawn is not None, what="the plot drawn")

    assert snap_compare(FailingLoss(), terminal_size=(80, 24), run_before=let_the_plot_draw)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_loss_pane_and_app_chrome_layout(snap_compare, size):
    async def let_the_plot_draw(pilot):
        plot = pilot.app.query_one(LossPlot)
        await wait_until(pilot, lambda: plot.replots > 0 and plot.drawn is not None, what="the plot drawn")

    assert snap_compare(FixedLoss(), terminal_size=size, run_before=let_the_plot_draw)
