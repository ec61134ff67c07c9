"""`check --json` in a folder whose name is not UTF-8 (Linux allows any bytes): the report is
written, valid UTF-8 JSON that reads back the same paths (it was a UnicodeEncodeError traceback)."""

from __future__ import annotations

import json
import os
import shutil

from minigpt.checks.report import load_report
from minigpt.cli import main


def test_check_json_in_a_folder_named_with_a_byte_that_is_not_utf8(tiny_workspace, tmp_path, capsys):
    # GIVEN a workspace in a folder whose name holds the byte 0xFF
    root = os.fsdecode(os.fsencode(str(tmp_path)) + b"/ws\xff")
    shutil.copytree(tiny_workspace.root, root)
    report = os.path.join(root, "report.json")
    # WHEN the checks write their JSON report there
    assert main(["check", "--workspace", root, "--only", "files", "--json", report]) == 0
    # THEN the file is UTF-8 JSON whose paths name the same bytes, and `report diff` reads it
    data = json.loads(open(os.fsencode(report), "rb").read().decode("utf-8"))
    paths = [row["path"] for row in data["checks"][-1]["values"]["files"]]
    assert all(os.fsencode(p).startswith(os.fsencode(root)) for p in paths), paths
    assert load_report(report)["checks"]
    assert main(["report", "diff", report, report]) == 0
