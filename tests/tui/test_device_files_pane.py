"""Pane 2: renders the environment and files checks' values."""

from __future__ import annotations

from minigpt_tui.panes.device_files import DeviceFilesPane

from .conftest import SIZE, rendered, wait_for_report


async def test_device_pane_shows_versions_device_and_every_file(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        await pilot.press("2")
        await pilot.pause()
        pane = app.query_one(DeviceFilesPane)
        env = rendered(pane.query_one("#device-env"))
        files = rendered(pane.query_one("#device-files"))
    values = report.by_id()["environment"].values
    assert values["torch"] in env and values["python"] in env
    assert "selected device" in env and "cpu" in env
    assert "CUDA available" in env
    assert "tokenizer" in files and "train_ids" in files and "✓ ok" in files
    for row in report.by_id()["files"].values["files"]:
        assert row["role"] in files
    assert pane.files is report.by_id()["files"] or pane.files.values == report.by_id()["files"].values


async def test_device_pane_flags_a_missing_file(workspace, make_app):
    (workspace / "data" / "encoded" / "train_ids.pt").unlink()
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        files = rendered(app.query_one(DeviceFilesPane).query_one("#device-files"))
    assert "✗ missing" in files
    assert "✗ fail" in files
