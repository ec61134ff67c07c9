"""A user's model class in the UI runs in the check sandbox: its os._exit is an error row, not a vanished app."""

from __future__ import annotations

from pathlib import Path

import pytest

from minigpt.checks import Status

from .conftest import SIZE, wait_for_report

HOSTILE = Path(__file__).resolve().parents[1] / "fixtures" / "hostile_models.py"


@pytest.mark.slow
async def test_a_model_that_calls_os_exit_is_an_error_row_and_the_app_keeps_running(workspace, make_app):
    app = make_app(workspace, model_spec=f"{HOSTILE}:ExitsGPT")
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        by_id = report.by_id()
        assert by_id["forward_shapes"].status is Status.ERROR
        assert "exited with code 0" in by_id["forward_shapes"].summary
        assert by_id["sampler_settings"].status is Status.PASS  # the run went on in a new child
        assert app.is_running
