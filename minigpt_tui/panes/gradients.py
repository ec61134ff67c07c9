"""Pane 5: the per-parameter gradient table, from the gradients check or a live training run.

Rows come from `minigpt.gradstats.grad_table` (via the check's `report.shared["grad_table"]`, a
`GradientsMeasured` message, or the last line of `logs/grads.jsonl` that the trainer appends at
each evaluation). Update/weight ratios come from the optimizer-update check.
"""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import DataTable, Static
from textual.worker import get_current_worker

from ..messages import ChecksFinished, GradientsMeasured

FLAG_TEXT = {"no_grad": "MISSING", "nonfinite": "NON-FINITE", "zero": "ZERO", "frozen": "frozen"}
PROBLEM_FLAGS = {"no_grad", "nonfinite", "zero"}  # frozen may be on purpose: marked, not alarmed
SORTS = {"name": "name", "grad": "grad norm", "ratio": "update ratio"}
COLUMNS = [
    ("mark", " "),
    ("name", "parameter"),
    ("flags", "flags"),
    ("grad", "grad norm"),
    ("ratio", "upd/weight"),
    ("weight", "weight norm"),
    ("shape", "shape"),
    ("numel", "params"),
]


class JsonlTail:
    """The last complete line of a growing JSONL file, reading only the bytes added since the
    last poll (the MetricsFollower idea). A shrunk or replaced file is read again from the top."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._offset, self._buffer, self._identity = 0, b"", None

    def poll(self) -> dict | None:
        """The newest complete record added since the last poll, or None."""
        try:
            f = open(self.path, "rb")
        except OSError:
            return None
        with f:
            st = os.fstat(f.fileno())
            identity = (st.st_dev, st.st_ino)
            if identity != self._identity or st.st_size < self._offset:
                self._offset, self._buffer, self._identity = 0, b"", identity
            if st.st_size == self._offset:
                return None
            f.seek(self._offset)
            data = f.read(st.st_size - self._offset)
        self._offset += len(data)
        lines = (self._buffer + data).split(b"\n")
        self._buffer = lines.pop()
        for raw in reversed(lines):  # only the newest record matters
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("rows"), list):
                return record
        return None


def _num(x: float | None, fmt: str = ".3g") -> str:
    if x is None:
        return "-"
    return f"{x:{fmt}}" if math.isfinite(x) else str(x)


class GradientsPane(Vertical):
    """Per-parameter gradient and weight norms, update ratios and problem flags."""

    DEFAULT_CSS = """
    GradientsPane { height: 1fr; }
    GradientsPane #grad-header { height: auto; padding: 0 1; }
    GradientsPane DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("n", "sort('name')", "Sort name"),
        Binding("g", "sort('grad')", "Sort grad"),
        Binding("o", "sort('ratio')", "Sort ratio"),  # not r: that re-runs the checks everywhere
    ]
    POLL_S = 1.0  # grads.jsonl is written once per evaluation: 1 s is plenty

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows: list[dict] = []
        self.ratios: dict[str, float | None] = {}
        self.global_norm: float | None = None
        self.clip: float | None = None
        self.source = "none yet"
        self.sort_key = "name"
        self.sort_reverse = False
        self._stop = threading.Event()
        self._finished: list[threading.Event] = []  # one per follow thread, set when it returns

    def compose(self) -> ComposeResult:
        yield Static(id="grad-header", markup=False)
        table = DataTable(id="grad-table", cursor_type="row", zebra_stripes=True)
        for key, label in COLUMNS:
            table.add_column(label, key=key)
        yield table

    def on_mount(self) -> None:
        self._render_header()
        workspace = getattr(self.app, "workspace", None)
        if workspace is not None:
            self._follow_grads(workspace.grads)

    def on_unmount(self) -> None:
        self._stop.set()
        for finished in self._finished:  # thread workers run on pooled threads: wait, do not join
            finished.wait(timeout=2)

    # -- sources ---------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="gradients-follow")
    def _follow_grads(self, path: Path) -> None:
        """Poll the tail of grads.jsonl; post the newest record as GradientsMeasured."""
        finished = threading.Event()
        self._finished.append(finished)
        worker, tail = get_current_worker(), JsonlTail(path)
        try:
            while not worker.is_cancelled and not self._stop.is_set():
                record = tail.poll()
                if record is not None:
                    self.post_message(
                        GradientsMeasured(
                            rows=record["rows"],
                            global_norm=record.get("global_norm"),
                            clip=record.get("clip"),
                            source=f"training step {record.get('step', '?')}",
                        )
                    )
                self._stop.wait(self.POLL_S)
        finally:
            finished.set()

    @on(GradientsMeasured)
    def on_gradients_measured(self, message: GradientsMeasured) -> None:
        self.show_rows(message.rows, message.global_norm, message.clip, message.source)

    @on(ChecksFinished)
    def show_check_results(self, message: ChecksFinished) -> None:
        results = message.report.by_id()
        # ratios from this run only: a skipped optimizer_update must not leave the last run's numbers
        update = results.get("optimizer_update")
        self.ratios = {r["name"]: r["ratio"] for r in (update.values.get("table") or [])} if update else {}
        grads = results.get("gradients")
        if grads is not None and grads.values.get("table"):
            self.show_rows(grads.values["table"], grads.values.get("global_norm"), 1.0, "gradients check")
        elif self.rows:
            self._rebuild()

    # -- rendering ----------------------------------------------------------------------------
    def show_rows(self, rows: list[dict], global_norm: float | None, clip: float | None, source: str) -> None:
        self.rows, self.global_norm, self.clip, self.source = list(rows), global_norm, clip, source
        self._rebuild()

    def action_sort(self, key: str) -> None:
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:  # norms and ratios: largest first; names: A to Z
            self.sort_key, self.sort_reverse = key, key != "name"
        self._rebuild()

    @on(DataTable.HeaderSelected)
    def _sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in SORTS:
            self.action_sort(key)
        elif key == "flags" or key == "mark":
            self.action_sort("grad")

    def sorted_rows(self) -> list[dict]:
        def value(row: dict):
            if self.sort_key == "name":
                return (0, row["name"])
            x = row.get("grad_norm") if self.sort_key == "grad" else self.ratios.get(row["name"])
            if x is None:  # missing sorts after every number in either direction
                return (-1, 0.0) if self.sort_reverse else (1, 0.0)
            return (0, x if math.isfinite(x) else math.inf)

        return sorted(self.rows, key=value, reverse=self.sort_reverse)

    def _rebuild(self) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for row in self.sorted_rows():
            flags = list(row.get("flags") or [])
            if row.get("grad_norm") is None and "no_grad" not in flags and "frozen" not in flags:
                flags.append("no_grad")
            problem = bool(PROBLEM_FLAGS.intersection(flags))
            style = "bold red" if problem else ("dim" if "frozen" in flags else "")
            mark = "!" if problem else ("-" if "frozen" in flags else " ")
            tied = f" (= {', '.join(row['tied_with'])})" if row.get("tied_with") else ""
            ratio = self.ratios.get(row["name"])
            cells = [
                mark,
                row["name"] + tied,
                " ".join(FLAG_TEXT.get(f, f) for f in flags) or "ok",
                _num(row.get("grad_norm")),
                _num(ratio, ".2e"),
                _num(row.get("weight_norm")),
                "x".join(map(str, row.get("shape") or [])) or "scalar",
                f"{row.get('numel', 0):,}",
            ]
            table.add_row(*(Text(c, style=style) for c in cells), key=row["name"])
        self._render_header()

    def _render_header(self) -> None:
        problems = sum(
            1
            for r in self.rows
            if PROBLEM_FLAGS.intersection(r.get("flags") or [])
            or r.get("grad_norm") is None
            and "frozen" not in (r.get("flags") or [])
        )
        clip = "off" if not self.clip else _num(self.clip)
        over = ""
        if self.clip and self.global_norm is not None and self.global_norm > self.clip:
            over = " (clipped)"
        arrow = "v" if self.sort_reverse else "^"
        frozen = sum(1 for r in self.rows if "frozen" in (r.get("flags") or []))
        found = f"! {problems} with problems" if problems else "no problems"
        found += f", {frozen} frozen" if frozen else ""
        text = (
            f"global norm {_num(self.global_norm, '.4g')}  clip {clip}{over}  |  source: {self.source}  |  "
            f"{len(self.rows)} parameters, {found}  |  sort: {SORTS[self.sort_key]} {arrow}  "
            f"[n]ame [g]rad rati[o]"
        )
        self.query_one("#grad-header", Static).update(Text(text))
