"""The Loss pane's words for the curve: its verdict, with its likely cause and what to try (the
training line's words are in `training_controls`). Pure functions of the values they are given, so
a test reads them without an app."""

from __future__ import annotations

import math

from rich.text import Text

from minigpt.logs.curve import SHAPE_SEVERITY, CurveDiagnosis
from minigpt_tui.widgets.humanize import clip_at_clause
from minigpt_tui.widgets.loss_plot import CurveSnapshot

VERDICT_LINES = 2  # the curve's verdict at most; its cause and what to try get one line each


def fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else (f"{x:{spec}}" if math.isfinite(x) else str(x))


def diagnosis_text(d: CurveDiagnosis | None, snap: CurveSnapshot, width: int = 76) -> Text:
    """The verdict in at most VERDICT_LINES lines (cut at a clause), then its likely cause and
    what to try, one line each: at 80x24 all three stay on screen."""
    if d is None:
        return Text("curve: no data yet" if not snap.n_points else "curve: diagnosing...")
    # the training_curve check's own severity: still_improving passes, unstable fails
    severity = SHAPE_SEVERITY.get(d.shape, "warn")
    ok = severity == "pass"
    mark, style = {"pass": ("OK", ""), "warn": ("!!", "bold yellow"), "fail": ("FAIL", "bold red")}.get(
        severity, ("--", "dim")
    )
    text = Text(clip_at_clause(f"curve {mark} {d.summary}", VERDICT_LINES * width), style=style)
    if not ok and d.causes:  # the cause the CLI prints ("too little data for the model size")
        text.append("\n" + clip_at_clause(f"  likely: {'; '.join(d.causes[:2])}", width), style="")
    if not ok and d.fixes:
        text.append("\n" + clip_at_clause(f"  try: {'; '.join(d.fixes[:2])}", width), style="bold")
    return text
