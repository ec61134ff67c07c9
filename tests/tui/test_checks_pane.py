"""Pane 1: rows fill in pipeline order, enter re-runs one check, the fault menu turns its check red."""

from __future__ import annotations

import pytest

from minigpt.io.workspace import Workspace
from minigpt_tui.panes.checks import ChecksPane
from minigpt_tui.screens.faults import FaultMenuScreen
from tests.waiting import eventually, wait_until

from .conftest import SIZE, rendered, wait_for_report


async def test_every_check_gets_a_row_with_a_status(workspace, make_app):
    from minigpt.checks import ordered_ids

    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        pane = app.query_one(ChecksPane)
        table = pane.table
        assert [key.value for key in table.rows] == ordered_ids()
        for cid in ordered_ids():
            status = str(table.get_cell(cid, "status"))
            assert status.split()[1] in ("pass", "warn", "skip"), (cid, status)  # mark + word, never colour alone
        assert report.by_id()["single_batch_overfit"].status.value == "skip"
        assert report.exit_code == 0


async def test_selecting_a_row_shows_values_causes_and_fixes(workspace, make_app):
    app = make_app(workspace, fault="no_shift")
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        pane = app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=pane.table.get_row_index("batch_shift"))

        def detail_shown():
            text = rendered(pane.query_one("#checks-detail-body"))
            assert "✗ fail batch_shift" in text
            assert "likely causes:" in text and "targets built as data[i:i+T]" in text
            assert "what to try:" in text and "targets equal inputs  yes" in text  # values for people
            assert "True" not in text and "{" not in text  # no Python reprs

        await eventually(pilot, detail_shown)


async def test_enter_reruns_the_highlighted_check_and_its_dependencies(workspace, make_app):
    from minigpt.checks import resolve_selection

    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        calls = []
        original = app.run_checks
        app.run_checks = lambda only=None: (calls.append(only), original(only))
        pane = app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=pane.table.get_row_index("batch_shift"))
        await pilot.press("enter")
        second = await wait_for_report(pilot, app, previous=first)
        assert calls == [["batch_shift"]]
        assert pane._run_total == len(resolve_selection(["batch_shift"])[0])
        assert len(second.results) == len(first.results)  # merged into the full report
        assert second.by_id()["batch_shift"] is not first.by_id()["batch_shift"]


@pytest.mark.slow
async def test_r_reruns_every_check(workspace, make_app):
    from minigpt.checks import ordered_ids

    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        await pilot.press("r")
        second = await wait_for_report(pilot, app, previous=first)
        assert len(second.results) == len(first.results) == len(ordered_ids())


@pytest.mark.slow  # a few seconds: the full run (CI) only
async def test_fault_menu_injects_no_shift_and_batch_shift_turns_red(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        first = await wait_for_report(pilot, app)
        assert first.by_id()["batch_shift"].status.value == "pass"
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultMenuScreen), what="the fault menu")
        menu = app.screen.query_one("#fault-list")
        menu.highlighted = menu.get_option_index("no_shift")
        await pilot.press("enter")
        second = await wait_for_report(pilot, app, previous=first)
        assert app.session.fault == "no_shift"
        assert second.fault == "no_shift"
        assert second.by_id()["batch_shift"].status.value == "fail"
        assert str(app.query_one(ChecksPane).table.get_cell("batch_shift", "status")) == "✗ fail"
        # clearing it brings the pass back
        await pilot.press("f")
        await wait_until(pilot, lambda: isinstance(app.screen, FaultMenuScreen), what="the fault menu")
        menu = app.screen.query_one("#fault-list")
        menu.highlighted = menu.get_option_index("__clear__")
        await pilot.press("enter")
        third = await wait_for_report(pilot, app, previous=second)
        assert third.by_id()["batch_shift"].status.value == "pass"


def _fixed_results():
    from minigpt.checks import CheckResult, Status

    grad_rows = [
        {"name": f"blocks.{i}.attn.qkv.weight", "shape": [64, 192], "numel": 12288, "grad_norm": 0.1, "flags": []}
        for i in range(30)
    ]
    return [
        CheckResult(
            "environment",
            "environment",
            Status.PASS,
            "Python 3.x",
            values={"cuda_version": None, "cuda_available": False, "gpu_memory_gib": 79.64},
        ),
        CheckResult(
            "gradients",
            "gradients",
            Status.FAIL,
            "2 parameters frozen",
            values={
                "frozen": ["blocks.1.attn.qkv.weight", "blocks.1.attn.proj.weight"],
                "global_norm": 2.61643705900835,
                "table": grad_rows,
            },
            duration_s=0.2,
        ),
        CheckResult("batch_shift", "batches", Status.PASS, "targets are inputs shifted by one"),
    ]


async def _fed_pane(pilot, results, judged=()):
    from minigpt.checks import Report
    from minigpt_tui.messages import CheckFinished, ChecksFinished, ChecksStarted

    pane = pilot.app.query_one(ChecksPane)
    pane.post_message(ChecksStarted([r.id for r in results], None))
    for i, r in enumerate(results):
        pane.post_message(CheckFinished(r, i, len(results)))
    report = Report(results=results, judged=list(judged), seconds=1.0)
    pane.post_message(ChecksFinished(report))
    await wait_until(pilot, lambda: pane.report is report, what="the pane to show the finished run")
    return pane


async def test_detail_shows_values_for_people_and_the_files_judged(tmp_path):
    from minigpt.checks import FileIdentity

    from ._pane_harness import PaneHarness

    judged = [FileIdentity("checkpoint", "/w/checkpoints/mini_gpt_best.pt", 1000, 0.0, step=200)]
    async with PaneHarness(ChecksPane, None).run_test(size=(120, 40)) as pilot:
        pane = await _fed_pane(pilot, _fixed_results(), judged)
        assert pane.selected_id == "gradients"  # the first failure is selected
        text = " ".join(rendered(pane.query_one("#checks-detail-body")).split())
        assert "blocks.1.attn.qkv.weight, blocks.1.attn.proj.weight" in text  # a list, not ['…', …]
        assert "global norm 2.616" in text
        assert "64 × 192" in text and "12,288" in text  # the row-dicts as a table
        assert "… 22 more rows (30 in all)" in text  # hundreds of lines become eight rows
        assert "['" not in text and "{'" not in text
        assert "checkpoint: /w/checkpoints/mini_gpt_best.pt (step 200" in text
        pane.table.move_cursor(row=0)

        def environment_shown():
            text = " ".join(rendered(pane.query_one("#checks-detail-body")).split())
            assert "cuda version none" in text and "None" not in text
            assert "cuda available no" in text and "gpu memory 79.6 GiB" in text

        await eventually(pilot, environment_shown)


@pytest.mark.slow
async def test_slash_filters_the_checks_and_escape_clears(tmp_path):
    from ._pane_harness import PaneHarness

    async with PaneHarness(ChecksPane, None).run_test(size=(80, 24)) as pilot:
        pane = await _fed_pane(pilot, _fixed_results())
        pane.table.focus()
        await pilot.press("slash", "s", "h", "i", "f", "t")
        assert [k.value for k in pane.table.rows] == ["batch_shift"]
        assert "filter 'shift': 1 of 3 shown" in str(pane.query_one("#checks-status").render())
        await pilot.press("enter")
        assert pilot.app.focused is pane.table
        await pilot.press("slash")
        await pilot.press("backspace", "backspace", "backspace", "backspace", "backspace", "f", "a", "i", "l")
        assert [k.value for k in pane.table.rows] == ["gradients"]  # the status word matches too
        await pilot.press("escape")
        assert [k.value for k in pane.table.rows] == ["environment", "gradients", "batch_shift"]
        assert pilot.app.focused is pane.table


async def test_the_filter_count_always_matches_the_rows_shown_and_the_run_words_stay(tmp_path):
    from minigpt_tui.messages import ChecksStarted

    from ._pane_harness import PaneHarness

    async with PaneHarness(ChecksPane, None).run_test(size=(80, 24)) as pilot:
        pane = await _fed_pane(pilot, _fixed_results())
        status = pane.query_one("#checks-status")
        # the finished run's words take the whole line: no progress bar beside them at 80 columns
        assert not pane.query_one("#checks-progress").display
        assert "done in 1.0s: 2 pass, 1 fail (gradients)" in str(status.render())
        pane.table.focus()
        await pilot.press("slash", "g", "r", "a", "d")
        assert [k.value for k in pane.table.rows] == ["gradients"]
        text = str(status.render())
        assert "1 fail" in text and "filter 'grad': 1 of 3 shown" in text  # the run's words are kept
        # WHEN a new run starts and finishes with the filter on, THEN the count still matches the table
        pane.post_message(ChecksStarted(["environment", "gradients", "batch_shift"], None))
        await wait_until(pilot, lambda: pane.query_one("#checks-progress").display, what="the progress bar")
        pane = await _fed_pane(pilot, _fixed_results())

        def count_matches():
            assert f"{pane.table.row_count} of 3 shown" in str(status.render())

        await eventually(pilot, count_matches)
        await pilot.press("escape")  # cleared: no count is left behind
        assert "filter" not in str(status.render()) and pane.table.row_count == 3


async def test_the_demo_workspace_says_its_split_overlap_warning_is_expected(tmp_path):
    from minigpt.checks import CheckResult, Status
    from minigpt_tui.demo import READY_MARKER

    from ._pane_harness import PaneHarness

    (tmp_path / READY_MARKER).write_text("200 steps\n")
    warn = CheckResult("split_overlap", "data", Status.WARN, "16/100 test windows occur verbatim in train")
    async with PaneHarness(ChecksPane, Workspace(tmp_path)).run_test(size=(80, 24)) as pilot:
        pane = await _fed_pane(pilot, [warn])
        assert "expected for the demo" in str(pane.table.get_cell("split_overlap", "summary"))
        pane.show_detail("split_overlap")
        assert "expected for the demo corpus" in rendered(pane.query_one("#checks-detail-body"))


@pytest.mark.slow
async def test_the_lr_probe_runs_with_lr_probe_and_its_details_plot_the_losses(workspace, make_app):
    app = make_app(workspace, lr_probe=True, run_learning_rate=0.2)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        probe = report.by_id()["lr_probe"]
        assert probe.status.value == "fail" and "lr 0.2 (--lr) is too high" in probe.summary
        pane = app.query_one(ChecksPane)
        pane.table.focus()
        pane.table.move_cursor(row=pane.table.get_row_index("lr_probe"))

        def plotted():
            text = rendered(pane.query_one("#checks-detail-body"))
            assert "lr probe: validation loss by step" in text
            assert "LR/10" in text and "3xLR" in text and "┤" in text  # the plot's legend and axis
            assert "curves" not in text  # plotted, not listed again as numbers

        await eventually(pilot, plotted)
