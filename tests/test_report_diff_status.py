"""`report diff` between reports where a check's status is no status (NaN, a number, a made-up
word) cannot compare them: exit 2 naming the file and the check, never a diff of nonsense."""

from __future__ import annotations

import json

import pytest

from minigpt.cli import main

REPORT = {"schema_version": 1, "checks": [{"id": "files", "status": "pass", "summary": "6 files found"}]}


@pytest.mark.parametrize("status", ["NaN", float("nan"), 3, None, "passed"])
def test_a_status_that_is_no_status_exits_2_naming_the_check(tmp_path, capsys, status):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(REPORT))
    b.write_text(json.dumps({**REPORT, "checks": [{**REPORT["checks"][0], "status": status}]}))
    assert main(["report", "diff", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert str(b) in err and "checks[0]" in err and "files" in err and "Traceback" not in err


def test_known_statuses_still_diff(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(REPORT))
    b.write_text(json.dumps({**REPORT, "checks": [{**REPORT["checks"][0], "status": "fail"}]}))
    assert main(["report", "diff", str(a), str(b)]) == 0
    assert "pass -> fail" in capsys.readouterr().out
