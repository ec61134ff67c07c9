"""A watched loop's folder as a new user opens it: the checks that cannot run there are one line,
and the panes that need a tokenizer or token IDs say why they have none (not "file not found")."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from minigpt.cli import main
from minigpt_tui.panes.batches import WATCHED_LOOP_NO_IDS, BatchesPane
from minigpt_tui.panes.sampler_prompt import WATCHED_LOOP_NO_TOKENIZER
from tests.fixtures import loops
from tests.waiting import wait_until

from .conftest import SIZE, rendered


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    run = tmp_path_factory.mktemp("watched") / "run"
    loops.nanogpt_loop(run, max_iters=20)
    return run


def test_check_on_a_watched_folder_prints_the_cascade_of_skips_as_one_line(watched, capsys):
    # WHEN `minigpt check` runs on a folder that holds only the watch's logs
    assert main(["check", "--workspace", str(watched), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    # THEN no line is a link of a "skipped: X skip" chain; the checks the missing files stop are
    # one line naming the check they need, after the checks that ran
    assert not [line for line in lines if "skipped: " in line and " skip" in line.split("skipped: ", 1)[1]], out
    cascade = [line for line in lines if "not run: they need files skip" in line]
    assert len(cascade) == 1, out
    loop_lines = [i for i, line in enumerate(lines) if "loop_targets_shifted" in line]
    assert loop_lines and loop_lines[0] < lines.index(cascade[0]), out
    # AND the counts come in the order the UI gives them: pass before skip
    assert "checks in" in lines[-2] and lines[-2].index("pass") < lines[-2].index("skip"), lines[-2]


async def test_the_batches_and_sampler_panes_say_a_watched_loop_stores_no_ids_or_tokenizer(watched, make_app):
    app = make_app(watched)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        batches = app.query_one(BatchesPane)
        view = batches.query_one("#batch-view", Static)
        await wait_until(pilot, lambda: "watched loop" in rendered(view), what="the Batches pane's note")
        assert " ".join(rendered(view).split()) == WATCHED_LOOP_NO_IDS
        await pilot.press("7")
        status = app.query_one("#sampler-status", Static)
        await wait_until(pilot, lambda: "watched loop" in rendered(status), what="the Sampler's note")
        text = " ".join(rendered(status).split())
        assert text == WATCHED_LOOP_NO_TOKENIZER and "not found" not in text
