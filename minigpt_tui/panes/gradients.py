"""Pane 5: per-parameter gradient norms from two labelled sources, switchable with `s`.

- **training**: the newest record of `logs/grads.jsonl`, which the trainer appends at each
  evaluation (followed like `tail -f`; a rewritten or truncated log drops what it showed).
- **gradients check**: the model the check measured (`GradientsValues.model`, usually a fresh
  model), with update/weight ratios from the optimizer_update check; the header shows the
  check's own verdict, so the pane never disagrees with pane 1.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Static
from textual.worker import get_current_worker

from minigpt_tui.host import host
from minigpt_tui.messages import ChecksFinished, GradientsMeasured
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.humanize import human_float
from minigpt_tui.widgets.jsonl_follow import JsonlFollower
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.status import status_text
from minigpt_tui.widgets.steady_table import SteadyTable
from minigpt_tui.widgets.table_filter import TableFilter, matches

if TYPE_CHECKING:
    from minigpt.checks import CheckResult

FLAG_TEXT = {"no_grad": "MISSING", "nonfinite": "NON-FINITE", "zero": "ZERO", "frozen": "frozen"}
PROBLEM_FLAGS = {"no_grad", "nonfinite", "zero"}  # frozen may be on purpose: marked, not alarmed
SORTS = {"name": "name", "grad": "grad norm", "ratio": "upd/weight"}  # each the header of its column
# key, header; after mark, name, flags and grad (always shown), the rest in the order they are dropped last
COLUMNS = {"mark": " ", "name": "parameter", "flags": "flags", "grad": "grad norm"}
OPTIONAL = {"ratio": "upd/weight", "weight": "weight norm", "numel": "params", "shape": "shape"}
SOURCES = {"training": "training log", "check": "gradients check"}
MIN_NAME = 14


@dataclass
class GradSource:
    """One table of gradients and what it is about."""

    rows: list[dict]
    global_norm: float | None
    clip: float | None
    label: str  # where the numbers come from, in words
    ratios: dict[str, float | None] = field(default_factory=dict)  # optimizer_update, same model
    verdict: CheckResult | None = None  # the gradients check's result (check source only)
    clipped: bool | None = None  # a watched run's step: measured clipped or not (None: not measured)


@dataclass
class TrainingGradientsRead(Message):
    """The follow thread read a new record from grads.jsonl (`record` None: the log was rewritten)."""

    record: dict | None
    path: str


def _num(x: float | None) -> str:
    return "-" if x is None else human_float(x)


def _flags(row: dict) -> list[str]:
    flags = list(row.get("flags") or [])
    if row.get("grad_norm") is None and "no_grad" not in flags and "frozen" not in flags:
        flags.append("no_grad")
    return flags


class GradientsPane(Vertical, RenderWhenShown):
    """Per-parameter gradient and weight norms, update ratios and problem flags."""

    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)

    DEFAULT_CSS = """
    GradientsPane { height: 1fr; }
    GradientsPane #grad-header { height: auto; }
    GradientsPane DataTable { height: 1fr; }
    """
    BINDINGS = [
        Binding("s", "switch_source", "Source"),
        Binding("n", "sort('name')", "Name"),  # short: the footer has 80 columns
        Binding("g", "sort('grad')", "Grad"),
        Binding("o", "sort('ratio')", "Ratio"),  # not r: that re-runs the checks everywhere
        Binding("slash", "open_filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]
    POLL_S = 1.0  # grads.jsonl is written once per evaluation: 1 s is plenty

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.sources: dict[str, GradSource | None] = {"training": None, "check": None}
        self.view = "training"  # which source the table shows
        self._chosen = False  # the user picked the source with `s`: do not switch for them
        # why the last key did nothing, in the header (a toast would stay over the next pane shown)
        self.key_note: str | None = None
        self.sort_key = "name"
        self.sort_reverse = False
        self.filter = ""
        self.columns: list[str] = []  # the column keys the table has now
        self._name_width = 0
        self.rebuilds = 0  # full table rebuilds (tests: a sort must not rebuild)
        self._dirty = True  # data changed while the pane was hidden
        self._stop = threading.Event()
        self._finished: list[threading.Event] = []

    # -- the shown source, as the old single-source attributes ---------------------------
    @property
    def current(self) -> GradSource | None:
        return self.sources[self.view]

    @property
    def rows(self) -> list[dict]:
        return self.current.rows if self.current else []

    @property
    def ratios(self) -> dict[str, float | None]:
        return self.current.ratios if self.current else {}

    @property
    def sorted_by(self) -> str:
        """The column the rows are sorted by: never one the table does not have (a source
        without update/weight ratios, the training log's, sorts by grad norm instead)."""
        return "grad" if self.sort_key == "ratio" and not self.ratios else self.sort_key

    @property
    def source(self) -> str:
        return self.current.label if self.current else "none yet"

    def compose(self) -> ComposeResult:
        yield LiveStatic(id="grad-header", markup=False)
        yield TableFilter(id="grad-filter")
        yield SteadyTable(id="grad-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self._render_header()
        workspace = host(self).workspace
        if workspace is not None:
            self._follow_grads(workspace.grads)

    def on_unmount(self) -> None:
        self._stop.set()
        for finished in self._finished:  # thread workers run on pooled threads: wait, do not join
            finished.wait(timeout=2)

    # -- sources ---------------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="gradients-follow")
    def _follow_grads(self, path: Path) -> None:
        """Poll grads.jsonl; post the newest record with a gradient table."""
        finished = threading.Event()
        self._finished.append(finished)
        worker, follower = get_current_worker(), JsonlFollower(path)
        try:
            while not worker.is_cancelled and not self._stop.is_set():
                records = [r for r in follower.poll() if isinstance(r.get("rows"), list)]
                if follower.reset and not records:
                    self.post_message(TrainingGradientsRead(None, str(path)))
                if records:
                    self.post_message(TrainingGradientsRead(records[-1], str(path)))
                self._stop.wait(self.POLL_S)
        finally:
            finished.set()

    @on(TrainingGradientsRead)
    def show_training_record(self, message: TrainingGradientsRead) -> None:
        record = message.record
        if record is None:  # a new run rewrote the log: the old numbers describe nothing on disk
            self.sources["training"] = None
        else:
            step = record.get("step")
            clipped = record.get("clipped")
            self.sources["training"] = GradSource(
                record["rows"],
                record.get("global_norm"),
                record.get("clip"),
                f"training step {step if step is not None else '?'} ({Path(message.path).name})",
                clipped=clipped if isinstance(clipped, bool) else None,
            )
        self._source_changed("training")

    @on(GradientsMeasured)
    def on_gradients_measured(self, message: GradientsMeasured) -> None:
        """Gradients of a live run handed over directly (same slot as the training log)."""
        self.sources["training"] = GradSource(message.rows, message.global_norm, message.clip, message.source)
        self._source_changed("training")

    @on(ChecksFinished)
    def show_check_results(self, message: ChecksFinished) -> None:
        results = message.report.by_id()
        grads, update = results.get("gradients"), results.get("optimizer_update")
        # ratios from this run only: a skipped optimizer_update must not leave the last run's numbers
        ratios = {r["name"]: r["ratio"] for r in (update.values.get("table") or [])} if update else {}
        if grads is None:
            return
        table = grads.values.get("table") or []
        model = grads.values.get("model") or "the checked model"
        self.sources["check"] = GradSource(
            list(table), grads.values.get("global_norm"), None, f"gradients check: {model}", ratios, grads
        )
        self._source_changed("check")

    def _source_changed(self, kind: str) -> None:
        if not self._chosen and self.sources[self.view] is None and self.sources[kind] is not None:
            self.view = kind  # nothing shown yet: show what arrived
        if kind == self.view:
            self._refresh()
        else:
            self._render_header()  # the other source's name in the header

    def action_switch_source(self) -> None:
        other = "check" if self.view == "training" else "training"
        self.view, self._chosen, self.key_note = other, True, None
        self._refresh()

    # -- sorting and filtering ----------------------------------------------------------------
    def action_sort(self, key: str) -> None:
        if key == "ratio" and not self.ratios:
            self.key_note = f"o: no upd/weight ratios in {self.source}: the gradients check's source has them (s)"
            self._render_header()
            return
        self.key_note = None
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:  # norms and ratios: largest first; names: A to Z
            self.sort_key, self.sort_reverse = key, key != "name"
        self._render_header()
        table = self.query_one(DataTable)
        same_columns = self._shown() and self._fit_columns() == (self.columns, self._name_width)
        if same_columns and not self._dirty and table.row_count:  # else the sort's column must appear
            order = {row["name"]: i for i, row in enumerate(self.sorted_rows())}
            table.sort("name", key=lambda cell: order.get(cell.plain.split(" (=")[0], 0))  # reorder, no rebuild
        else:
            self._refresh()

    @on(DataTable.HeaderSelected)
    def _sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key in SORTS:
            self.action_sort(key)
        elif key in ("flags", "mark"):
            self.action_sort("grad")

    def action_open_filter(self) -> None:
        self.query_one(TableFilter).open(return_to=self.query_one(DataTable))

    def action_clear_filter(self) -> None:
        self.query_one(TableFilter).action_clear_filter()

    @on(TableFilter.FilterChanged, "#grad-filter")
    def apply_filter(self, message: TableFilter.FilterChanged) -> None:
        if message.query != self.filter:
            self.filter = message.query
            self._refresh()

    def sorted_rows(self) -> list[dict]:
        ratios = self.ratios

        def value(row: dict):
            if self.sorted_by == "name":
                return (0, row["name"])
            x = row.get("grad_norm") if self.sorted_by == "grad" else ratios.get(row["name"])
            if x is None:  # missing sorts after every number in either direction
                return (-1, 0.0) if self.sort_reverse else (1, 0.0)
            return (0, x if math.isfinite(x) else math.inf)

        return sorted(self.rows, key=value, reverse=self.sort_reverse)

    def visible_rows(self) -> list[dict]:
        rows = self.sorted_rows()
        if self.filter:
            rows = [
                r for r in rows if matches(self.filter, r["name"], " ".join(FLAG_TEXT.get(f, f) for f in _flags(r)))
            ]
        return rows

    # -- rendering: only while shown, and only what changed ------------------------------------
    def _shown(self) -> bool:
        return self.is_mounted and self.region.area > 0

    def on_show(self) -> None:
        if self._dirty:
            self._refresh()

    def on_resize(self) -> None:
        if self._shown() and self._fit_columns() != (self.columns, self._name_width):
            self._rebuild()

    def _refresh(self) -> None:
        self._render_header()
        if not self._shown():
            self._dirty = True
            return
        self._rebuild()

    def _fit_columns(self) -> tuple[list[str], int]:
        """The columns that fit the width (optional ones dropped in reverse priority) and the name
        column's width: plain names always fit, a tied-weights suffix gets what is left."""
        rows, width = self.rows, self.query_one(DataTable).size.width or self.size.width
        budget = width - 2  # the vertical scrollbar
        cells = [self._cells(r) for r in rows]
        plain_w = max([len(r["name"]) for r in rows] + [9])
        full_w = max([len(c["name"]) for c in cells] + [9])
        flags_w = max([len(c["flags"]) for c in cells] + [5])
        used = (1 + 2) + (flags_w + 2) + (9 + 2) + max(MIN_NAME, min(plain_w, budget // 2)) + 2
        keep = ["mark", "name", "flags", "grad"]
        for key, header in OPTIONAL.items():
            if key == "ratio" and not self.ratios:
                continue
            w = max([len(c[key]) for c in cells] + [len(header)])
            if used + w + 2 <= budget or key == self.sorted_by:  # the sort's column always shows
                keep.append(key)
                used += w + 2
        name_w = max(MIN_NAME, min(plain_w, budget // 2))
        return keep, min(full_w, name_w + max(0, budget - used))

    def _ties_in_name(self) -> bool:
        """Every name with its tie fits the name column as it is now (never cut to "(= l…")."""
        return all(len(self._label_of(r)) <= self._name_width for r in self.rows)

    @staticmethod
    def _label_of(row: dict) -> str:
        tied = row.get("tied_with")
        return row["name"] + (f" (= {', '.join(tied)})" if tied else "")

    @staticmethod
    def _shape_of(row: dict) -> str:
        return "×".join(map(str, row.get("shape") or [])) or "scalar"

    def _cells(self, row: dict, ties_in_name: bool = True) -> dict[str, str]:
        """A row's cells; a tie goes in the name ("wte.weight (= lm_head.weight)") when the name
        column holds it whole, else the flags say "tied" and the header names the pair."""
        flags = _flags(row)
        tied = [] if ties_in_name or not row.get("tied_with") else ["tied"]
        return {
            "mark": "!" if PROBLEM_FLAGS.intersection(flags) else ("-" if "frozen" in flags else " "),
            "name": self._label_of(row) if ties_in_name else row["name"],
            "flags": " ".join([*(FLAG_TEXT.get(f, f) for f in flags), *tied]) or "ok",
            "grad": _num(row.get("grad_norm")),
            "ratio": f"{r:.2e}" if (r := self.ratios.get(row["name"])) is not None else "-",
            "weight": _num(row.get("weight_norm")),
            "numel": f"{row.get('numel', 0):,}",
            "shape": self._shape_of(row),
        }

    def _rebuild(self) -> None:
        self._dirty = False
        self.rebuilds += 1
        table = self.query_one(DataTable)
        columns, name_width = self._fit_columns()
        if (columns, name_width) != (self.columns, self._name_width):
            table.clear(columns=True)
            for key in columns:
                label = COLUMNS.get(key) or OPTIONAL[key]
                table.add_column(label, key=key, width=name_width if key == "name" else None)
            self.columns, self._name_width = columns, name_width
        else:
            table.clear()
        ties_in_name = self._ties_in_name()
        for row in self.visible_rows():
            flags = _flags(row)
            style = "bold red" if PROBLEM_FLAGS.intersection(flags) else ("dim" if "frozen" in flags else "")
            cells = self._cells(row, ties_in_name)
            table.add_row(
                *(Text(cells[k], style=style, no_wrap=True, overflow="ellipsis") for k in columns), key=row["name"]
            )
        self._render_header()

    def _render_header(self) -> None:
        self.render_when_shown("header", self._draw_header)

    def _draw_header(self) -> None:
        src = self.current
        other = "check" if self.view == "training" else "training"
        switch = Text(f"  ·  s: {SOURCES[other]}")
        other_source = self.sources[other]
        verdict = other_source.verdict if other_source is not None else None
        if verdict is not None:  # the check's verdict stays in sight while the training log is shown
            switch.append(" ").append_text(status_text(verdict.status))
        elif self.sources[other] is None:
            switch.append(" (none yet)")
        # the switch's hint stays whole; a long source name is what gets cut
        room = (self.size.width or 80) - len("source: ") - len(switch) - 2
        label = self.source if len(self.source) <= room else self.source[: max(8, room - 1)] + "…"
        line1 = Text.assemble(("source: ", "bold"), Text(label), switch, no_wrap=True, overflow="ellipsis")
        lines = [line1]
        if src is None:
            hint = "waiting for the gradients check" if self.view == "check" else "no logs/grads.jsonl record yet"
            lines.append(Text(hint, style="dim"))
        else:
            if src.verdict is not None:  # a check's single backward pass: no clipping involved
                clip = ""
            elif src.clipped is not None:  # the watch measured the step: the loop's threshold is not written
                clip = f" · clipped to {_num(src.clip)}" if src.clipped else " · not clipped at this step"
            else:
                over = " (clipped)" if src.clip and src.global_norm is not None and src.global_norm > src.clip else ""
                clip = f" · clip {_num(src.clip) if src.clip else 'off'}{over}"
            numbers = Text(f"global norm {_num(src.global_norm)}{clip} · {len(src.rows)} parameters · ")
            lines.append(numbers + self._verdict(src))
        arrow = "↓" if self.sort_reverse else "↑"
        shown = len(self.visible_rows()) if self.filter else None
        hidden = [
            OPTIONAL[k] for k in OPTIONAL if self.columns and k not in self.columns and (k != "ratio" or self.ratios)
        ]
        tail = f"sort {SORTS[self.sorted_by]} {arrow} (n/g/o) · / filter"
        if shown is not None:
            tail += f" {self.filter!r}: {shown} of {len(self.rows)}"
        if hidden:
            tail += f" · narrow: {', '.join(hidden)} hidden"
        lines.append(Text(tail, style="dim", no_wrap=True, overflow="ellipsis"))
        if self.key_note:
            lines.append(Text(self.key_note, style="yellow"))
        ties = [f"{r['name']} = {', '.join(r['tied_with'])}" for r in self.rows if r.get("tied_with")]
        if ties and self.columns and not self._ties_in_name():  # the name column is too narrow for them
            lines.append(Text(f"tied: {'; '.join(ties)}", style="dim"))
        self.query_one("#grad-header", Static).update(Group(*lines))

    @staticmethod
    def _verdict(src: GradSource) -> Text:
        if src.verdict is not None:  # the gradients check's own verdict: never a second opinion
            r = src.verdict
            return Text.assemble(status_text(r.status), " ", Text(r.summary))
        problems = sum(1 for r in src.rows if PROBLEM_FLAGS.intersection(_flags(r)))
        frozen = sum(1 for r in src.rows if "frozen" in _flags(r))
        found = Text(f"! {problems} flagged", style="bold red") if problems else Text("none flagged")
        return found + Text(f", {frozen} frozen" if frozen else "") + Text(" (log flags)", style="dim")
