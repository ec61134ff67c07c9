"""Pilot tests for the gradients pane (5)."""

from __future__ import annotations

import io
import json

from rich.console import Console
from textual.widgets import DataTable, Static

from minigpt.checks import CheckResult, Report, Status
from minigpt.io.workspace import Workspace
from minigpt_tui.messages import ChecksFinished, GradientsMeasured
from minigpt_tui.panes.gradients import GradientsPane
from tests.waiting import eventually, wait_until

from ._pane_harness import PaneHarness
from .conftest import rendered

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


def _header(pane) -> str:
    return " ".join(rendered(pane.query_one("#grad-header", Static)).split())


def _table_names(table: DataTable) -> list[str]:
    return [table.get_row_at(i)[1].plain for i in range(table.row_count)]


def _row_text(table: DataTable, name: str) -> str:
    return " ".join(cell.plain for cell in table.get_row(name))


async def test_gradients_message_shows_rows_with_visible_flags_and_sorting_reorders(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(100, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(GradientsMeasured(ROWS, global_norm=3.2, clip=1.0, source="gradients check"))
        table = pane.query_one(DataTable)

        def shown():
            assert table.row_count == 4
            assert "MISSING" in _row_text(table, "b.unused") and "!" in _row_text(table, "b.unused")
            assert "NON-FINITE" in _row_text(table, "c.bad") and "!" in _row_text(table, "c.bad")
            assert "ok" in _row_text(table, "a.weight")
            header = _header(pane)
            assert "global norm 3.2" in header and "clip 1" in header and "(clipped)" in header
            assert "source: gradients check" in header and "2 flagged" in header
            assert _table_names(table) == ["a.weight", "b.unused", "c.bad", "d.big"]  # by name

        await eventually(pilot, shown)
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
        table = pane.query_one(DataTable)

        def ratios_shown():
            assert table.row_count == 4
            assert "5.00e-02" in _row_text(table, "d.big")

        await eventually(pilot, ratios_shown)
        # WHEN the upd/weight header is clicked (found from the columns' widths, which follow the data)
        keys = [key.value for key in table.columns]
        assert "ratio" in keys, keys
        x = sum(column.get_render_width(table) for column in list(table.columns.values())[: keys.index("ratio")])
        await pilot.click("#grad-table", offset=(x + 1, 0))
        # THEN the table sorts by it
        await wait_until(pilot, lambda: pane.sort_key == "ratio", what="the click to sort by ratio")

        def sorted_by_ratio():
            assert _table_names(table)[:2] == ["d.big", "a.weight"]

        await eventually(pilot, sorted_by_ratio)


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

        def followed():
            assert pane.source == "training step 50 (grads.jsonl)"
            assert pane.query_one(DataTable).row_count == 1

        await eventually(pilot, followed)


def _frozen_report(status=Status.FAIL) -> Report:
    rows = [dict(r, tied_with=[]) for r in ROWS[:1]] + [
        {
            "name": "blocks.1.attn.qkv.weight",
            "shape": [64, 192],
            "numel": 12288,
            "grad_norm": None,
            "weight_norm": 3.0,
            "tied_with": [],
            "flags": ["frozen"],
        }
    ]
    result = CheckResult(
        "gradients",
        "gradients",
        status,
        "1 parameter frozen (requires_grad=False): blocks.1.attn.qkv.weight",
        values={"table": rows, "global_norm": 0.9, "model": "fresh model (debug shape)"},
    )
    return Report(results=[result])


async def test_training_and_check_gradients_are_two_labelled_sources_and_s_switches(tmp_path):
    # GIVEN a training log with gradients at step 200
    (tmp_path / "logs").mkdir()
    record = {"step": 200, "global_norm": 0.7, "clip": 1.0, "rows": [dict(ROWS[3])]}
    (tmp_path / "logs" / "grads.jsonl").write_text(json.dumps(record) + "\n")
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(GradientsPane)
        table = pane.query_one(DataTable)

        def training_shown():
            assert pane.view == "training" and _table_names(table) == ["d.big"]

        await eventually(pilot, training_shown)
        # WHEN the gradients check fails on a frozen parameter of a fresh model
        pane.post_message(ChecksFinished(_frozen_report()))
        await wait_until(
            pilot, lambda: "s: gradients check ✗ fail" in _header(pane), what="the check's verdict in the header"
        )
        # THEN the training gradients stay on screen and the check's table waits behind `s`
        assert _table_names(table) == ["d.big"]
        assert "training step 200" in _header(pane) and "s: gradients check ✗ fail" in _header(pane)
        table.focus()
        await pilot.press("s")
        header = _header(pane)
        assert "gradients check: fresh model (debug shape)" in header
        assert "✗ fail" in header and "1 parameter frozen" in header  # the check's verdict, not "no problems"
        assert "no problems" not in header
        assert _table_names(table) == ["a.weight", "blocks.1.attn.qkv.weight"]
        await pilot.press("s")
        assert _table_names(table) == ["d.big"]


async def test_a_passing_check_reads_pass_in_the_header(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(ChecksFinished(_frozen_report(Status.PASS)))

        def passed():
            assert pane.view == "check" and "✓ pass" in _header(pane)

        await eventually(pilot, passed)


async def test_a_rewritten_grads_log_drops_the_old_training_table(tmp_path):
    (tmp_path / "logs").mkdir()
    grads = tmp_path / "logs" / "grads.jsonl"
    grads.write_text(json.dumps({"step": 500, "global_norm": 0.7, "clip": 1.0, "rows": [dict(ROWS[0])]}) + "\n")
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.POLL_S = 0.05
        await wait_until(pilot, lambda: pane.source.startswith("training step 500"), what="the step 500 record")
        grads.write_text("")  # a fresh run truncates the log

        def dropped():
            assert pane.sources["training"] is None and pane.query_one(DataTable).row_count == 0

        await eventually(pilot, dropped)


async def test_slash_filters_the_rows_and_escape_clears(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(100, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(GradientsMeasured(ROWS, global_norm=3.2, clip=1.0, source="live"))
        table = pane.query_one(DataTable)
        await wait_until(pilot, lambda: table.row_count == 4, what="the four rows")
        # the closed filter is out of the focus chain: the app's pane key focuses the table, not a text field
        assert next(w for w in pane.query("*") if w.focusable) is table
        table.focus()
        await pilot.press("slash", "m", "i", "s", "s")  # the MISSING flag
        assert _table_names(table) == ["b.unused"]
        assert "'miss': 1 of 4" in _header(pane)
        await pilot.press("enter")  # back to the table, filter kept
        assert app.focused is table and table.row_count == 1
        await pilot.press("escape")  # on the table too, as in k9s
        assert table.row_count == 4 and pane.filter == ""
        await pilot.press("slash", "z", "escape")
        assert table.row_count == 4 and pane.filter == "" and app.focused is table


LONG_ROWS = [
    {
        "name": f"blocks.{i}.attn.qkv.weight",
        "shape": [64, 192],
        "numel": 12288,
        "grad_norm": 0.1 * i,
        "weight_norm": 1.0,
        "tied_with": [],
        "flags": [],
    }
    for i in range(1, 13)
]


async def test_narrow_terminal_drops_low_priority_columns_and_says_so(tmp_path):
    for size, hidden in (((64, 24), True), ((80, 24), False), ((120, 40), False)):
        app = PaneHarness(GradientsPane, Workspace(tmp_path))
        async with app.run_test(size=size) as pilot:
            pane = app.query_one(GradientsPane)
            pane.post_message(GradientsMeasured(LONG_ROWS, global_norm=1.0, clip=1.0, source="live"))

            def fitted(pane=pane, size=size, hidden=hidden):
                table = pane.query_one(DataTable)
                assert {"name", "flags", "grad"} <= set(pane.columns)
                assert ("shape" not in pane.columns) is hidden, size
                assert ("hidden" in _header(pane)) is hidden
                width = sum(c.get_render_width(table) for c in table.columns.values())
                assert width <= table.size.width  # nothing cut off to the right
                assert "blocks.12.attn.qkv.weight" in _table_names(table)

            await eventually(pilot, fitted)


async def test_sorting_reorders_rows_without_rebuilding_the_table(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(GradientsMeasured(LONG_ROWS, global_norm=1.0, clip=1.0, source="live"))
        await pilot.pause()
        before = pane.rebuilds
        pane.query_one(DataTable).focus()
        await pilot.press("g")
        assert _table_names(pane.query_one(DataTable))[0] == "blocks.12.attn.qkv.weight"
        assert pane.rebuilds == before


def test_follower_reads_only_new_complete_lines_and_restarts_on_a_rewrite(tmp_path):
    from minigpt_tui.widgets.jsonl_follow import JsonlFollower

    path = tmp_path / "grads.jsonl"
    follower = JsonlFollower(path)
    assert follower.poll() == []  # not written yet
    path.write_text('{"step": 1}\n{"step": 2')  # the second line is still being written
    assert follower.poll() == [{"step": 1}]
    with open(path, "a") as f:
        f.write("}\nnot json\n")
    assert follower.poll() == [{"step": 2}] and follower.bad_lines == 1 and not follower.reset
    # a new run rewrites the file to the same length: the first bytes differ
    path.write_text('{"step": 7}\n{"step": 8}\nnot json\n')
    assert follower.poll() == [{"step": 7}, {"step": 8}] and follower.reset and follower.resets == 1
    path.write_text("")  # truncated
    assert follower.poll() == [] and follower.reset


async def test_the_table_is_never_sorted_by_a_column_it_does_not_show(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        # GIVEN the training log's gradients: no update/weight ratios
        pane.post_message(GradientsMeasured(ROWS, 0.9, 1.0, "training step 5"))
        await wait_until(pilot, lambda: pane.query_one(DataTable).row_count == 4, what="the training rows")
        pane.focus()
        await pilot.press("o")
        # THEN `o` says why it cannot, and the header names a column the table has
        await wait_until(pilot, lambda: "o: no upd/weight ratios" in _header(pane), what="`o`'s note in the header")
        assert pane.sorted_by == "name" and "ratio" not in pane.columns
        header = rendered(pane.query_one("#grad-header"))
        assert "sort name" in header and "upd/weight" not in header.split("sort")[1].split("·")[0]
        # GIVEN the check's source with ratios, sorted by them, in a pane too narrow for every column
        pane.sources["check"] = None
        report = Report(
            results=[
                CheckResult("gradients", "gradients", Status.PASS, "x", values={"table": ROWS, "global_norm": 0.9}),
                CheckResult(
                    "optimizer_update",
                    "optimization",
                    Status.PASS,
                    "y",
                    values={"table": [{"name": r["name"], "ratio": 1e-3} for r in ROWS]},
                ),
            ]
        )
        pane.post_message(ChecksFinished(report))
        await wait_until(pilot, lambda: pane.sources["check"] is not None, what="the check's source")
        pane.action_switch_source() if pane.view != "check" else None
        await pilot.pause()
        pane.action_sort("ratio")

        def by_ratio():
            assert pane.sorted_by == "ratio" and "ratio" in pane.columns

        await eventually(pilot, by_ratio)
        # WHEN the source switches to the training log (no ratios), THEN it sorts by grad norm
        pane.action_switch_source()

        def by_grad():
            assert pane.sorted_by == "grad" and "sort grad norm" in rendered(pane.query_one("#grad-header"))

        await eventually(pilot, by_grad)


async def test_a_watched_runs_measured_clipping_is_in_the_header(tmp_path):
    # GIVEN nanoGPT's loop (clip 1.0) watched for 3 steps: the watch writes the step-1 gradients
    from tests.fixtures import loops

    loops.nanogpt_loop(tmp_path, max_iters=3)
    record = json.loads((tmp_path / "logs" / "grads.jsonl").read_text().splitlines()[0])
    assert record["clipped"] is True and abs(record["clip"] - 1.0) < 1e-3  # cut to the loop's max_norm
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(100, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.POLL_S = 0.05
        await wait_until(pilot, lambda: pane.source.startswith("training step 1"), what="the step 1 record")
        # THEN the header says the step was clipped to 1, as measured, never "clip off"
        header = _header(pane)
        assert "clipped to 1" in header and "clip off" not in header, header


TIED_ROWS = [
    {
        "name": f"blocks.{i}.attn.proj.weight",
        "shape": [64, 64],
        "numel": 4096,
        "grad_norm": 0.1 * (i + 1),
        "weight_norm": 1.0,
        "tied_with": [],
        "flags": [],
    }
    for i in range(2)
] + [
    {
        "name": "token_embedding.weight",
        "shape": [103, 64],
        "numel": 6592,
        "grad_norm": 0.9,
        "weight_norm": 1.6,
        "tied_with": ["lm_head.weight"],
        "flags": [],
    }
]


def _tied_report() -> Report:
    ratios = [{"name": r["name"], "ratio": 0.05} for r in TIED_ROWS]
    return Report(
        results=[
            CheckResult("gradients", "gradients", Status.PASS, "ok", values={"table": TIED_ROWS, "global_norm": 2.6}),
            CheckResult("optimizer_update", "optimization", Status.PASS, "y", values={"table": ratios}),
        ]
    )


async def test_a_tied_parameter_is_never_cut_at_80_columns(tmp_path):
    # GIVEN the gradients check's table with a tied embedding, at 80 columns
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(ChecksFinished(_tied_report()))
        table = pane.query_one(DataTable)

        # THEN its name is whole (no "(= l…"), its flags say tied, and the header names the pair
        def whole():
            assert table.row_count == 3
            row = _row_text(table, "token_embedding.weight")
            assert "…" not in row and "token_embedding.weight" in row and "tied" in row
            assert "tied: token_embedding.weight = lm_head.weight" in _header(pane)

        await eventually(pilot, whole)


async def test_the_source_switch_hint_stays_whole_at_80_columns(tmp_path):
    # GIVEN a check's source whose name is longer than the line at 80 columns
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        report = _tied_report()
        report.results[0].values["model"] = "fresh model (debug shape or checkpoint config)"
        pane.post_message(ChecksFinished(report))

        # THEN the source's name is cut, never the key that switches it
        def hint_whole():
            header = pane.query_one("#grad-header", Static)
            console = Console(width=header.size.width, record=True, file=io.StringIO(), color_system=None)
            console.print(header.content)  # as wide as the pane draws it
            first = console.export_text().splitlines()[0]
            assert first.rstrip().endswith("s: training log (none yet)"), first

        await eventually(pilot, hint_whole)


async def test_a_tied_parameter_carries_its_pair_in_its_name_when_there_is_room(tmp_path):
    app = PaneHarness(GradientsPane, Workspace(tmp_path))
    async with app.run_test(size=(160, 24)) as pilot:
        pane = app.query_one(GradientsPane)
        pane.post_message(ChecksFinished(_tied_report()))

        def pair_in_name():
            table = pane.query_one(DataTable)
            assert table.row_count == 3
            row = _row_text(table, "token_embedding.weight")
            assert "token_embedding.weight (= lm_head.weight)" in row and "…" not in row
            assert "tied:" not in _header(pane)

        await eventually(pilot, pair_in_name)
