"""Pane 1: the checks in pipeline order, live progress, and the selected check's details."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.coordinate import Coordinate
from textual.widgets import DataTable, Label, ProgressBar, Static

from minigpt.data.corpus import DEMO_EXPECTED
from minigpt_tui.host import host
from minigpt_tui.messages import CheckFinished, CheckProgressed, ChecksFinished, ChecksStarted, CheckStarted
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.humanize import values_grid
from minigpt_tui.widgets.status import status_text
from minigpt_tui.widgets.steady_table import SteadyTable
from minigpt_tui.widgets.table_filter import TableFilter, matches

if TYPE_CHECKING:
    from minigpt.checks.result import Report

COLUMNS = ("status", "check", "time", "summary")


class ChecksTable(SteadyTable):
    """The checks, one row each; `enter` re-runs the highlighted one (not a mouse click)."""

    BINDINGS = [
        Binding("enter", "rerun_highlighted", "Rerun"),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def action_rerun_highlighted(self) -> None:
        if self.row_count and self.cursor_row >= 0:
            check_id = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
            if check_id is not None:
                host(self).run_checks(only=[check_id])


class ChecksPane(Vertical):
    """Renders the engine's CheckResults as they arrive; never computes a result itself."""

    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)

    BINDINGS = [
        Binding("slash", "open_filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.results: dict = {}  # check id -> CheckResult (latest)
        self.states: dict[str, str] = {}  # check id -> "pending" / "running" while it has no new result
        self.order: list[str] = []  # ids in pipeline order, as far as known
        self.running: str | None = None
        self.report: Report | None = (
            None  # the last finished Report: its `judged` files say what the verdicts are about
        )
        self.filter = ""
        self._run_total = 0
        self._run_done = 0
        self._run_text = "waiting for torch…"  # the run's state; the status line adds the filter's count
        self.expected: dict[str, str] = {}  # check id -> why its warning is expected here (the demo)

    def compose(self) -> ComposeResult:
        with Horizontal(id="checks-progress-row"):
            yield Label("waiting for torch…", id="checks-status", markup=False)
            yield ProgressBar(total=100, show_eta=False, id="checks-progress")
        yield TableFilter(id="checks-filter")
        table = ChecksTable(id="checks-table", cursor_type="row", zebra_stripes=True)
        table.add_column("status", key="status", width=9)
        table.add_column("check", key="check", width=22)
        table.add_column("time", key="time", width=7)
        table.add_column("summary", key="summary")
        yield table
        with VerticalScroll(id="checks-detail"):
            yield Static(
                "Select a check to see its values, likely causes and what to try.",
                id="checks-detail-body",
                markup=False,
            )

    def on_mount(self) -> None:
        from minigpt_tui.demo import READY_MARKER

        workspace = host(self).workspace
        if workspace is not None and (Path(workspace.root) / READY_MARKER).is_file():
            self.expected = dict(DEMO_EXPECTED)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fit_summary)

    def _fit_summary(self) -> None:
        """The summary column takes the width left over (DataTable has no fr columns). Only when that
        width changed: showing the pane again resizes it too, and a refit measures every row."""
        table = self.table
        if table.size.width == 0:  # hidden
            return
        fixed = sum(c.get_render_width(table) for key, c in table.columns.items() if key.value != "summary")
        summary = next(c for key, c in table.columns.items() if key.value == "summary")
        width = max(20, table.size.width - fixed - 2 * table.cell_padding - 2)
        if not summary.auto_width and summary.width == width:
            return
        summary.auto_width = False
        summary.width = width
        # DataTable measures its widths again only after a cell update asks for it
        row_key = next(iter(table.rows), None)
        if row_key is not None:
            table.update_cell(row_key, summary.key, table.get_cell(row_key, summary.key), update_width=True)
        else:  # no row yet: the first row added measures them
            table.refresh()

    @property
    def table(self) -> ChecksTable:
        return self.query_one(ChecksTable)

    # -- rows -------------------------------------------------------------------------------
    def _cells(self, cid: str) -> tuple:
        state = self.states.get(cid)
        r = self.results.get(cid)
        if r is None:
            return status_text(state or "pending"), cid, "", ""
        summary = Text(r.summary, no_wrap=True, overflow="ellipsis")
        if cid in self.expected and r.status.value == "warn" and not state:
            summary = Text.assemble(("expected for the demo: ", "dim"), r.summary, no_wrap=True, overflow="ellipsis")
        return status_text(state or r.status), cid, f"{r.duration_s:.2f}s", summary

    def _visible(self, cid: str) -> bool:
        if not self.filter:
            return True
        r = self.results.get(cid)
        status = self.states.get(cid) or (r.status.value if r else "pending")
        return matches(self.filter, cid, status, r.stage if r else "", r.summary if r else "")

    def _show_row(self, cid: str) -> None:
        """Update the row in place (cheap), add it when new, drop it when the filter hides it."""
        if cid not in self.order:
            self.order.append(cid)
        table = self.table
        if self.filter:  # a row may appear or go: the count follows the table
            self.call_after_refresh(self._render_status)
        if not self._visible(cid):
            if cid in table.rows:
                table.remove_row(cid)
            return
        if cid in table.rows:
            for key, value in zip(COLUMNS, self._cells(cid)):
                table.update_cell(cid, key, value)
        else:
            at = self.order.index(cid)
            before_ok = all(c in table.rows or not self._visible(c) for c in self.order[:at])
            if before_ok and not any(c in table.rows for c in self.order[at + 1 :]):
                table.add_row(*self._cells(cid), key=cid)  # lands in pipeline order: no rebuild
            else:
                self._rebuild_rows()

    def _rebuild_rows(self) -> None:
        table = self.table
        keep = self.selected_id
        table.clear()
        for cid in self.order:
            if self._visible(cid):
                table.add_row(*self._cells(cid), key=cid)
        if keep is not None and keep in table.rows:
            table.move_cursor(row=table.get_row_index(keep))

    @property
    def selected_id(self) -> str | None:
        table = self.table
        if not table.row_count or table.cursor_row < 0:
            return None
        return table.coordinate_to_cell_key(Coordinate(table.cursor_row, 0)).row_key.value

    # -- filter -----------------------------------------------------------------------------
    def action_open_filter(self) -> None:
        self.query_one(TableFilter).open(return_to=self.table)

    def action_clear_filter(self) -> None:
        self.query_one(TableFilter).action_clear_filter()

    @on(TableFilter.FilterChanged, "#checks-filter")
    def apply_filter(self, message: TableFilter.FilterChanged) -> None:
        if message.query != self.filter:
            self.filter = message.query
            self._rebuild_rows()
            self._render_status()

    # -- worker events ----------------------------------------------------------------------
    @on(ChecksStarted)
    def mark_pending(self, message: ChecksStarted) -> None:
        for cid in message.check_ids:
            self.states[cid] = "pending"
            self._show_row(cid)
        self._run_total, self._run_done = len(message.check_ids), 0
        self._set_progress(0.0, f"running {len(message.check_ids)} checks")

    @on(CheckStarted)
    def mark_running(self, message: CheckStarted) -> None:
        self.running = message.check_id
        self.states[message.check_id] = "running"
        self._show_row(message.check_id)
        self._set_progress(
            message.index / max(1, message.total), f"{message.index + 1}/{message.total} {message.check_id}"
        )

    @on(CheckProgressed)
    def show_check_progress(self, message: CheckProgressed) -> None:
        total = max(1, self._run_total)
        self._set_progress(
            (self._run_done + message.fraction) / total,
            f"{self._run_done + 1}/{total} {message.check_id} {message.fraction:.0%}",
        )

    @on(CheckFinished)
    def fill_row(self, message: CheckFinished) -> None:
        r = message.result
        self.results[r.id] = r
        self.states.pop(r.id, None)
        self._run_done = message.index + 1
        self._show_row(r.id)
        self._set_progress(self._run_done / max(1, message.total), f"{self._run_done}/{message.total} done")
        if self.selected_id == r.id:
            self.show_detail(r.id)

    @on(ChecksFinished)
    def show_totals(self, message: ChecksFinished) -> None:
        report = self.report = message.report
        self.running = None
        if report.cancelled:  # rows still marked pending or running were not run this time
            for cid in list(self.states):
                self.states.pop(cid)
                self._show_row(cid)
        from minigpt.checks.result import Report  # loaded by the checks by now; not before the first frame

        counts = Report(results=list(self.results.values())).counts()  # the CLI's order: pass, warn, fail, …
        text = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
        state = "cancelled" if report.cancelled else f"done in {report.seconds:.1f}s"
        fault = f"fault {report.fault} · " if report.fault else ""  # first: the most important state
        failed = [cid for cid, r in self.results.items() if r.status.value in ("fail", "error")]
        failing = f" ({', '.join(failed[:3])}{'…' if len(failed) > 3 else ''})" if failed else ""
        self._set_progress(1.0, f"{fault}{state}: {text}{failing}", done=True)
        table = self.table
        visible_failed = [cid for cid in failed if cid in table.rows]
        if visible_failed and table.cursor_row <= 0:  # the user has not moved: show the first failure's causes
            table.move_cursor(row=table.get_row_index(visible_failed[0]))
        selected = self.selected_id
        if selected is not None:
            self.show_detail(selected)  # the judged files arrived with the report

    def _set_progress(self, fraction: float, text: str, done: bool = False) -> None:
        bar = self.query_one("#checks-progress", ProgressBar)
        bar.update(progress=round(100 * min(1.0, fraction)))
        bar.display = not done  # a finished run's words take the whole line ("1 fail" was cut at 80)
        self._run_text = text
        self._render_status()

    def filter_count(self) -> tuple[int, int]:
        """(rows shown, checks known): what the status line says, counted from the table itself."""
        return self.table.row_count, len(self.order)

    def mark_stale(self, why: str) -> None:
        """The results describe files that changed since: say so first, until the next run."""
        self._run_text = f"STALE ({why}; r re-runs) · {self._run_text}"
        self._render_status()

    def show_run_failed(self, error: str) -> None:
        """The check run died (its worker raised `error`, a type's name): the status line says so."""
        self._run_text = f"check run failed: {error}"
        self._render_status()

    def _render_status(self) -> None:
        text = self._run_text
        if self.filter:
            shown, known = self.filter_count()
            text = f"{text} · filter {self.filter!r}: {shown} of {known} shown"
        self.query_one("#checks-status", Label).update(text)

    # -- details ----------------------------------------------------------------------------
    @on(DataTable.RowHighlighted, "#checks-table")
    def follow_cursor(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key is not None and event.row_key.value is not None:
            self.show_detail(event.row_key.value)

    def show_detail(self, check_id: str) -> None:
        body = self.query_one("#checks-detail-body", Static)
        r = self.results.get(check_id)
        if r is None:
            body.update(Text(f"{check_id}: not run yet"))
            return
        expected = self.expected.get(check_id) if r.status.value == "warn" else None
        body.update(detail_view(r, self.report.judged if self.report is not None else (), expected))


def detail_view(r, judged=(), expected: str | None = None) -> Group:
    """One check result for people: verdict, causes, fixes, notes, its values as a grid and the
    files the run judged (where its numbers come from); `expected` says why a warning is no fault."""
    parts: list[RenderableType] = [
        Text.assemble(status_text(r.status), " ", (r.id, "bold"), f"  stage {r.stage}  {r.duration_s:.2f}s"),
        Text(r.summary),
    ]
    if expected:
        parts.append(Text(expected, style="bold"))
    values = dict(r.values or {})
    curves = values.get("curves") if r.id == "lr_probe" else None
    if isinstance(curves, dict) and curves:
        from minigpt_tui.widgets.probe_plot import probe_plot

        parts.append(probe_plot(curves))
        del values["curves"]  # drawn above: not again as numbers
    for title, items in (("likely causes", r.causes), ("what to try", r.fixes), ("notes", r.notes)):
        if items:
            parts.append(Text(title + ":", style="bold"))
            parts.extend(Text(f"  • {item}") for item in items)
    if values:
        parts.append(Text("values:", style="bold"))
        parts.append(values_grid(values))
    if judged:
        parts.append(Text("this run judged:", style="bold"))
        parts.extend(Text(f"  {f.role}: {f.describe()}") for f in judged)
    return Group(*parts)
