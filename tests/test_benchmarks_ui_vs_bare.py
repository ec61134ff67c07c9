"""benchmarks/bare_app.py (the yardstick of `ui_vs_bare`) and the screen helpers that read tmux captures."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bare_app import ROWS, TITLES, BareApp  # noqa: E402


async def test_bare_app_has_seven_tabs_of_tables_switched_by_digit_keys():
    from textual.widgets import DataTable, TabbedContent, TabPane

    app = BareApp()
    async with app.run_test(size=(80, 24)) as pilot:
        tabs = app.query_one(TabbedContent)
        assert [str(p.id) for p in app.query(TabPane)] == [f"tab-{n}" for n in range(1, 8)]
        assert [t.row_count for t in app.query(DataTable)] == [ROWS] * 7
        for n in (3, 7, 1):
            await pilot.press(str(n))
            assert tabs.active == f"tab-{n}"
        await pilot.press("q")
    assert len(TITLES) == 7


def test_content_rows_are_below_the_tab_bar_and_its_underline():
    import run

    inspector = "\n".join(["header 21:07", " 1 Checks  2 Device  7 Sampler", "━━╸━━", "row a", "row b", "footer"])
    bare = "\n".join([" 1 Checks  2 Device  7 Sampler", "━━╸━━", "row a", "row b", "row c"])
    assert run._content(inspector) == ["row a", "row b"]
    assert run._content(bare) == ["row a", "row b"]
    assert run.CLOCK.sub("", "ckpt step 100 21:06 · cpu") == "ckpt step 100  · cpu"


def test_spread_reports_median_min_max_and_count():
    import run

    assert run._spread("x", [3.0, 1.0, 2.0, 10.0, 4.0]) == {"x": 3.0, "x_min_max": [1.0, 10.0], "x_repetitions": 5}


@pytest.mark.slow
def test_ui_vs_bare_measures_both_apps_in_tmux(tmp_path):
    """One repetition of the tmux measurement on a small trained workspace: every key press seen on
    both screens and both ratios reported (the figures themselves are not judged here)."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed")
    import run

    from minigpt.data.prepare import prepare_workspace
    from minigpt.io.workspace import Workspace

    ws = Workspace(tmp_path / "ws")
    prepare_workspace("demo", ws)
    run.train_briefly(ws)
    out = run.ui_vs_bare(ws.root, reps=1)
    assert out["pane_switch_lost_presses_inspector"] == out["pane_switch_lost_presses_bare"] == 0
    presses = 7 * run.SWITCH_CYCLES_PER_REP  # seven pane keys a cycle
    assert out["pane_switch_presses_inspector"] == out["pane_switch_presses_bare"] == presses
    assert out["first_frame_ratio_vs_bare"] > 0 and out["pane_switch_ratio_vs_bare"] > 0
