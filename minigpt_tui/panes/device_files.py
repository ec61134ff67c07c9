"""Pane 2: Python, torch and the device; every required file with its size and status.

Everything shown comes from the `environment` and `files` checks' values.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..messages import CheckFinished
from ..widgets.status import status_text

FILE_STYLE = {
    "ok": "green",
    "absent": "dim",
    "missing": "bold red",
    "empty": "bold red",
    "suspiciously small": "yellow",
}
FILE_MARK = {"ok": "✓", "absent": "-", "missing": "✗", "empty": "✗", "suspiciously small": "!"}
ENV_FIELDS = [
    ("python", "Python"),
    ("torch", "torch"),
    ("cuda_available", "CUDA available"),
    ("cuda_version", "CUDA version"),
    ("mps_available", "MPS available"),
    ("device", "selected device"),
    ("gpu_name", "GPU"),
    ("gpu_memory_gib", "GPU memory (GiB)"),
    ("platform", "platform"),
    ("executable", "executable"),
]


class DeviceFilesPane(VerticalScroll):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.environment = None  # CheckResult of "environment"
        self.files = None  # CheckResult of "files"

    def compose(self) -> ComposeResult:
        yield Static("environment: waiting for the environment check…", id="device-env", markup=False)
        yield Static("files: waiting for the files check…", id="device-files", markup=False)

    @on(CheckFinished)
    def render_result(self, message: CheckFinished) -> None:
        r = message.result
        if r.id == "environment":
            self.environment = r
            self.query_one("#device-env", Static).update(self._env_table(r))
        elif r.id == "files":
            self.files = r
            self.query_one("#device-files", Static).update(self._files_table(r))

    @staticmethod
    def _env_table(r) -> Table:
        table = Table(
            title=Text.assemble("Environment  ", status_text(r.status)),
            title_justify="left",
            show_header=False,
            box=None,
            padding=(0, 2),
        )
        table.add_column(style="bold")
        table.add_column()
        values = r.values
        for key, label in ENV_FIELDS:
            if key in values:
                value = values[key]
                shown = ("yes" if value else "no") if isinstance(value, bool) else str(value)
                table.add_row(label, Text(shown))
        if "gpu_name" not in values:
            table.add_row("GPU", Text("none (not a CUDA device)", style="dim"))
        if r.status.value != "pass":
            table.add_row("finding", Text(r.summary))
        return table

    @staticmethod
    def _files_table(r) -> Table:
        table = Table(
            title=Text.assemble("Files  ", status_text(r.status), "  ", Text(r.summary)), title_justify="left"
        )
        table.add_column("role", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("size", justify="right", no_wrap=True)
        table.add_column("path", overflow="fold")
        for row in r.values.get("files", []):
            status = row["status"]
            role = row["role"] + ("" if row.get("required") else " (optional)")
            table.add_row(
                role,
                Text(f"{FILE_MARK.get(status, '?')} {status}", style=FILE_STYLE.get(status, "")),
                row.get("size") or "-",
                Text(row["path"]),
            )
        return table
