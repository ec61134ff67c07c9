"""Nothing heavy loads before the first frame: the app and every pane import without torch."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "numpy", "minigpt.checks.context", "minigpt.train.trainer", "minigpt.sample.generate")


def test_the_app_and_its_panes_import_without_torch_or_the_engine():
    # GIVEN everything the first frame needs: the entry point, the app, all seven panes built
    code = (
        "import minigpt_tui.__main__ as m; m.build_parser(); "
        "from minigpt_tui.app import MiniGPTApp; from minigpt_tui.workbench import build_panes; "
        "build_panes()"
    )
    # WHEN it runs under -X importtime
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    imported = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    # THEN no heavy module was imported (importtime lists every module the first time it loads)
    assert imported, "importtime printed nothing: the test would pass vacuously"
    assert "textual" in imported
    loaded_heavy = sorted(name for name in imported if name in HEAVY)
    assert not loaded_heavy, f"imported before the first frame: {loaded_heavy}"
