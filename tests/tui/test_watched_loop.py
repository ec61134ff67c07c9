"""The UI on a folder `minigpt.watch` writes: opened as it is (no demo offer), the loop checks in the
checks pane, and re-judged when the loop's log grows."""

from __future__ import annotations

import json
import os

import pytest
import torch

from minigpt.checks import Status
from minigpt_tui import disk_watch
from tests.fixtures import loops
from tests.waiting import wait_until

from .conftest import SIZE, wait_for_report


@pytest.mark.slow
async def test_a_watched_loops_folder_opens_with_its_loop_checks_and_is_rejudged_as_it_grows(
    tmp_path, make_app, monkeypatch
):
    # GIVEN a watched nanoGPT-style loop that never calls model.train() after evaluating
    run = tmp_path / "run"
    loops.nanogpt_loop(run, bug="no_train_after_eval", max_iters=20)
    monkeypatch.setattr(disk_watch, "LOOP_RECHECK_S", 0.2)
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
        await wait_until(pilot, lambda: app.is_running, what="the app to keep running")


@pytest.mark.slow
async def test_a_folder_opened_before_its_loop_starts_is_judged_again_when_the_loop_writes(
    tmp_path, make_app, monkeypatch
):
    # GIVEN the UI opened on the run folder before the loop wrote anything ("open as it is")
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.setattr(disk_watch, "LOOP_RECHECK_S", 0.2)
    monkeypatch.setattr(disk_watch, "JUDGED_POLL_S", 0.2)
    app = make_app(run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        report = await wait_for_report(pilot, app)
        assert report.by_id()["files"].status is Status.FAIL
        # WHEN a watched loop then records its steps there, holding the folder's lock
        import minigpt

        model = torch.nn.Linear(4, 4)
        watch = minigpt.watch(model, torch.optim.SGD(model.parameters(), lr=0.1), workspace=run)
        loops.nanogpt_loop(run / "loop", max_iters=20)  # a finished loop's log, moved into the run folder
        (run / "logs").mkdir(exist_ok=True)
        (run / "logs" / "loop.jsonl").write_bytes((run / "loop" / "logs" / "loop.jsonl").read_bytes())

        # THEN every check runs again (not only the loop checks): the folder is a watched loop's,
        # and the header names the loop's PID while it holds the lock
        def judged_as_a_loop() -> bool:
            last = app.session.last_report
            return not app.checks.running and last.by_id()["files"].status is Status.SKIP

        await wait_until(pilot, judged_as_a_loop, what="the checks to judge the loop's folder")
        assert app.session.last_report.by_id()["loop_train_mode"].status is Status.PASS
        await wait_until(pilot, lambda: f"watched loop PID {os.getpid()}" in app.sub_title, what="the loop's PID")
        watch.close()
        await wait_until(pilot, lambda: "PID" not in app.sub_title, what="the PID to go")
        assert "watched loop" in app.sub_title
