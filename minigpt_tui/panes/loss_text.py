"""The Loss pane's words for the curve: its verdict, with its likely cause and what to try (the
training line's words are in `training_controls`). Pure functions of the values they are given, so
a test reads them without an app."""

from __future__ import annotations

import math
import textwrap

from rich.text import Text

from minigpt.logs.curve import SHAPE_SEVERITY, CurveDiagnosis, fmt_loss
from minigpt_tui.curve_store import CurveSnapshot
from minigpt_tui.widgets.humanize import clip_at_clause

VERDICT_LINES = 2  # the curve's verdict at most; its cause and what to try get one line each
HEAD_CAUSES = 2  # causes (and fixes) named in the head; the rest are under it


def fmt(x: float | None, spec: str = ".4f") -> str:
    return "-" if x is None else (f"{x:{spec}}" if math.isfinite(x) else str(x))


def fmt_loss_or_dash(x: float | None) -> str:
    """A loss as the verdict writes it (`fmt_loss`), so one value reads the same on both lines."""
    return "-" if x is None else (fmt_loss(x) if math.isfinite(x) else str(x))


def wrap_within(text: str, width: int, lines: int) -> list[str]:
    """`text` word-wrapped to `width` in at most `lines` lines, cut at a clause and marked "…" when
    it does not fit: counted in wrapped lines, since a cut at lines x width characters can still
    wrap onto one line more."""
    limit = lines * width
    while True:
        wrapped = textwrap.wrap(clip_at_clause(text, limit), width, break_on_hyphens=False)
        if len(wrapped) <= lines or limit <= width // 2:
            return wrapped[:lines]
        limit -= max(1, sum(len(line) + 1 for line in wrapped[lines:]))


def pack_fields(fields: list[str], width: int, sep: str = " · ") -> list[str]:
    """The fields joined by `sep` into lines of at most `width` cells, a field never split across
    two lines (a field longer than the width alone on its line)."""
    lines: list[str] = []
    for f in fields:
        if lines and len(lines[-1]) + len(sep) + len(f) <= width:
            lines[-1] += sep + f
        else:
            lines.append(f)
    return lines


def _head_word(d: CurveDiagnosis, snap: CurveSnapshot | None) -> str:
    """ "curve", or "curve at step N" when the verdict read fewer steps than the status line shows:
    its "last" values are then from another reading, and must not pass for the status line's."""
    at = d.values.get("last_step") if d.values else None
    if snap is None or at is None or snap.last_step is None or at == snap.last_step:
        return "curve"
    return f"curve at step {at:,}"


def _severity(d: CurveDiagnosis) -> tuple[str, str, str]:
    # the training_curve check's own severity: still_improving passes, unstable fails
    severity = SHAPE_SEVERITY.get(d.shape, "warn")
    mark, style = {"pass": ("OK", ""), "warn": ("!!", "bold yellow"), "fail": ("FAIL", "bold red")}.get(
        severity, ("--", "dim")
    )
    return severity, mark, style


def diagnosis_text(d: CurveDiagnosis | None, snap: CurveSnapshot | None, width: int = 76) -> Text:
    """The head, one line per row within `width`: the verdict in at most VERDICT_LINES lines (cut
    at a clause), then its likely cause and what to try, one line each: at 80x24 all stay on screen.
    What it cuts is in `diagnosis_more`."""
    return _verdict(d, snap, width)[0]


def diagnosis_more(d: CurveDiagnosis | None, snap: CurveSnapshot | None, width: int = 76) -> Text | None:
    """All of the verdict, every cause and every fix, for the lines under the head (the pane lets
    them scroll into view); None when the head already shows all of it."""
    return _verdict(d, snap, width)[1]


def _verdict(d: CurveDiagnosis | None, snap: CurveSnapshot | None, width: int) -> tuple[Text, Text | None]:
    if d is None:
        return Text("curve: no data yet" if snap is None or not snap.n_points else "curve: diagnosing..."), None
    severity, mark, style = _severity(d)
    whole = f"{_head_word(d, snap)} {mark} {d.summary}"
    verdict = wrap_within(whole, width, VERDICT_LINES)
    cut = " ".join(verdict) != " ".join(whole.split())
    head = Text("\n".join(verdict), style=style)
    lines = [whole]
    for word, items, line_style in (("likely", d.causes, ""), ("try", d.fixes, "bold")):
        if not items:
            continue
        lines.append(f"  {word}: {'; '.join(items)}")
        if severity == "pass":  # a passing verdict keeps its advice under the head
            cut = True
            continue
        shown = clip_at_clause(f"  {word}: {'; '.join(items[:HEAD_CAUSES])}", width)
        head.append("\n" + shown, style=line_style)
        cut = cut or shown != lines[-1]
    if not cut:
        return head, None
    more = Text("in full:", style="dim")
    for line in lines:
        more.append("\n" + "\n".join(textwrap.wrap(line, width, subsequent_indent="    ", break_on_hyphens=False)))
    return head, more
