"""User model code that exits the process or never returns is an error result, never a hang or exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.cli import main

HOSTILE = Path(__file__).parent / "fixtures" / "hostile_models.py"


def _check(ws, cls, config, *extra, tmp_path):
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "minigpt", "check", "--workspace", str(ws.root), "--model", f"{HOSTILE}:{cls}"]
    cmd += ["--config", str(config), "--skip-overfit", "--device", "cpu", "--json", str(report), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    return proc, json.loads(report.read_text()) if report.exists() else None


def test_sys_exit_in_forward_is_an_error_result_naming_the_check(tiny_workspace, config, capsys):
    code = main(["check", "--workspace", str(tiny_workspace.root), "--model", f"{HOSTILE}:SysExitGPT"]
                + ["--config", str(config), "--skip-overfit", "--device", "cpu", "--no-isolate"])  # fmt: skip
    assert code == 1
    out = capsys.readouterr().out
    assert "called sys.exit(0) during forward_shapes" in out and "Traceback" not in out


@pytest.mark.slow
def test_os_exit_in_forward_is_an_error_and_the_run_goes_on(tiny_workspace, config, tmp_path):
    proc, report = _check(tiny_workspace, "ExitsGPT", config, tmp_path=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # never the 0 that os._exit(0) asked for
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["forward_shapes"]["status"] == "error"
    assert "exited with code 0 during forward_shapes" in checks["forward_shapes"]["summary"]
    assert checks["sampler_settings"]["status"] == "pass"  # later checks still ran in a new process
    assert "Traceback" not in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_forward_that_never_returns_times_out_per_check(tiny_workspace, config, tmp_path):
    proc, report = _check(tiny_workspace, "HangsGPT", config, "--check-timeout", "3", tmp_path=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    checks = {c["id"]: c for c in report["checks"]}
    assert "no result after 3 s" in checks["forward_shapes"]["summary"]
    assert checks["initial_loss"]["status"] == "skip"  # behind the timed-out check, as for any failure
    assert checks["sampler_settings"]["status"] == "pass"


def test_a_model_that_forges_a_report_on_the_pipe_is_named_and_runs_no_code_in_the_parent(
    tiny_workspace, config, tmp_path, monkeypatch
):
    # GIVEN a model that writes an "all pass" report on the check's event pipe, as a pickle whose
    # loading would create a file and as a JSON frame with a made-up HMAC, then exits 0
    marker = tmp_path / "ran-in-the-parent"
    monkeypatch.setenv("MINIGPT_TEST_MARKER", str(marker))
    proc, report = _check(tiny_workspace, "ForgesReportGPT", config, "--only", "forward_shapes", tmp_path=tmp_path)
    # THEN the forgery is an error naming the pipe, not a green run, and the pickle never ran
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = {c["id"]: c for c in report["checks"]}["forward_shapes"]
    assert result["status"] == "error"
    assert "that the check engine did not write" in result["summary"], result["summary"]
    assert any("wrote on the check's event pipe" in c for c in result["causes"]), result["causes"]
    assert not marker.exists()
    assert "Traceback" not in proc.stdout + proc.stderr
