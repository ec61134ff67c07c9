"""The UI on a folder `minigpt.watch` writes: opened as it is (no demo offer), the loop checks in the
checks pane, and re-judged when the loop's log grows."""

from __future__ import annotations

import json

import pytest

from minigpt.checks import Status
from minigpt_tui import app as app_module
from tests.fixtures import loops

from .conftest import SIZE, wait_for_report, wait_until


@pytest.mark.slow
async def test_a_watched_loops_folder_opens_with_its_loop_checks_and_is_rejudged_as_it_grows(
    tmp_path, make_app, monkeypatch
):
    # GIVEN a watched nanoGPT-style loop that never calls model.train() after evaluating
    run = tmp_path / "run"
    loops.nanogpt_loop(run, bug="no_train_after_eval", max_iters=20)
    monkeypatch.setattr(app_module, "LOOP_RECHECK_S", 0.2)
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        # WHEN the app opens it THEN no demo is offered and the loop check names the bug
        assert not app.needs_setup
        report = await wait_for_report(pilot, app)
        result = report.by_id()["loop_train_mode"]
        assert result.status is Status.FAIL and "model.train() missing" in " ".join(result.causes)
        assert report.by_id()["files"].status is Status.SKIP
        # WHEN the loop's log grows (another step recorded) THEN the loop checks run again
        await pilot.pause(0.5)
        with open(run / "logs" / "loop.jsonl", "a") as fh:
            last = json.loads((run / "logs" / "loop.jsonl").read_text().splitlines()[-2])
            fh.write(json.dumps({**last, "step": last["step"] + 1}) + "\n")
        await wait_for_report(pilot, app, previous=report)
        again = app.session.last_report.by_id()
        assert again["loop_train_mode"].values["steps"] == result.values["steps"] + 1
        assert again["loop_train_mode"].status is Status.FAIL
        await wait_until(pilot, lambda: app.is_running, 5, "the app to keep running")
