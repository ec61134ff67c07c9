"""The Loss pane's words: the curve's verdict (with its likely cause and what to try) and the
training line. Pure functions of the values they are given, so a test reads them without an app."""

from __future__ import annotations

import math
from pathlib import Path

from rich.text import Text

from minigpt.logs.curve import SHAPE_SEVERITY, CurveDiagnosis
from minigpt_tui.messages import TrainingEnded
from minigpt_tui.training import TrainingRun
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


def training_text(
    run: TrainingRun | None, last_exit: TrainingEnded | None, train_args: list[str] | None, note: str | None
) -> Text:
    """The training line: the UI's own run (`run`, while it goes), how the last one ended, or how `s`
    would start one."""
    if run is not None:
        pid = run.pid if run.pid is not None else "…"
        return Text(f"training: RUNNING PID {pid} {note or ''}· log {run.log_path.name} · x stop")
    if last_exit is not None:
        e = last_exit
        ok = e.returncode == 0
        if e.stopped and not ok:
            what, ok = f"stopped from here (exit code {e.returncode})", True
        else:
            what = "finished (exit 0)" if ok else f"FAILED (exit code {e.returncode})"
        text = Text(f"training: {what} · log {Path(e.log_path).name} · s start again", style="" if ok else "bold red")
        tail = e.log_tail.splitlines()[-3:]
        if tail and not ok:
            text.append("\n" + "\n".join("  " + line for line in tail), style="dim")
        return text
    how = " ".join(train_args) if train_args else "the workspace's own settings"
    return Text(f"training: not started here · s start ({how}){' · ' + note if note else ''}")
