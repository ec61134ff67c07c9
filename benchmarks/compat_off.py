"""minigpt-tui with some of `minigpt_tui/textual_compat.py`'s shortcuts switched off, for
`benchmarks/run.py --only compat_gains` (the gain each one earns); the app itself has no such switch.

    COMPAT_OFF=line_keeping python benchmarks/compat_off.py --workspace WS --skip-overfit

COMPAT_OFF is a comma-separated list of the names in OFF; each puts Textual's own behaviour back
before the app is imported."""

from __future__ import annotations

import os

from textual.widgets import DataTable

import minigpt_tui.textual_compat as compat


def _line_keeping() -> None:
    compat.LineKeepingTable = DataTable  # type: ignore[misc]  # SteadyTable then drops its lines as DataTable does


OFF = {"line_keeping": _line_keeping}


def switch_off(names: str) -> None:
    for name in filter(None, names.split(",")):
        OFF[name]()


if __name__ == "__main__":
    switch_off(os.environ.get("COMPAT_OFF", ""))
    from minigpt_tui.__main__ import main

    main()
