"""Pane 2: Python, torch and the device (the `environment` check); a live view of GPU, CPU and
memory sampled once a second while the pane is shown; every file with its size and status (the
`files` check). Each block says where its numbers come from.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static
from textual.worker import get_current_worker

from minigpt_tui.host import host
from minigpt_tui.messages import CheckFinished
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.device_stats import DeviceSample, DeviceSampler
from minigpt_tui.widgets.humanize import human_bytes, human_scalar, shorten_left
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.status import status_text

if TYPE_CHECKING:
    from minigpt.checks.result import CheckResult

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
    ("gpu_memory_gib", "GPU memory"),
    ("platform", "platform"),
    ("executable", "executable"),
]
SAMPLE_S = 1.0  # at most one sample a second


@dataclass
class DeviceSampled(Message):
    sample: DeviceSample


def _pair(used: int | None, total: int | None) -> str:
    if used is None:
        return "-"
    return human_bytes(used) + (f" of {human_bytes(total)} ({used / total:.0%})" if total else "")


def live_table(s: DeviceSample) -> Table:
    """One sample for people; rows only for what was measured."""
    table = Table(
        title=Text("Live  (every 1 s from " + (", ".join(s.sources) or "nothing") + ")"),
        title_justify="left",
        show_header=False,
        box=None,
        padding=(0, 2),
    )
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    if s.gpu_name is not None:
        table.add_row("GPU", Text(s.gpu_name))
        table.add_row("GPU memory used", _pair(s.gpu_used_bytes, s.gpu_total_bytes))
        if s.allocated_bytes is not None:
            table.add_row(
                "this process (torch)",
                f"{human_bytes(s.allocated_bytes)} allocated, {human_bytes(s.reserved_bytes or 0)} reserved",
            )
        util = [f"{s.gpu_util_percent:.0f}% busy"] if s.gpu_util_percent is not None else []
        util += [f"{s.temperature_c:.0f} °C"] if s.temperature_c is not None else []
        if util:
            table.add_row("GPU load", ", ".join(util))
    else:
        table.add_row("GPU", Text("none visible (no NVML, no CUDA in torch)", style="dim"))
    if s.cpu_percent is not None:
        table.add_row("CPU", f"{s.cpu_percent:.0f}% of {s.cpus or '?'} cores")
    table.add_row("memory", _pair(s.mem_used_bytes, s.mem_total_bytes))
    if s.training_pid is not None:
        rss = human_bytes(s.training_rss_bytes) if s.training_rss_bytes is not None else "not readable"
        gpu = f", {human_bytes(s.training_gpu_bytes)} on the GPU" if s.training_gpu_bytes is not None else ""
        table.add_row(f"training (PID {s.training_pid})", f"{rss} resident{gpu}")
    else:
        table.add_row("training", Text("not running (no workspace lock held)", style="dim"))
    if s.ui_rss_bytes is not None:
        table.add_row("this UI", f"{human_bytes(s.ui_rss_bytes)} resident")
    return table


class DeviceFilesPane(VerticalScroll, RenderWhenShown):
    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)
    make_sampler = DeviceSampler  # (workspace) -> an object with .sample(); tests pass a fake

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.environment: CheckResult | None = None  # of "environment"
        self.files: CheckResult | None = None  # of "files"
        self.sample: DeviceSample | None = None
        self.samples = 0
        self._files_width = -1  # the width the files table was cut to
        self._shown = threading.Event()  # sample only while someone looks
        self._stop = threading.Event()
        self._finished = threading.Event()

    def compose(self) -> ComposeResult:
        yield LiveStatic("environment: waiting for the environment check…", id="device-env", markup=False)
        yield LiveStatic("files: waiting for the files check…", id="device-files", markup=False)
        yield LiveStatic("live: sampled while this pane is shown", id="device-live", markup=False)

    def on_mount(self) -> None:
        workspace = host(self).workspace
        self._sample_loop(self.make_sampler(workspace.root if workspace is not None else None))

    def on_show(self) -> None:
        self._shown.set()

    def on_hide(self) -> None:
        self._shown.clear()

    def on_unmount(self) -> None:
        self._stop.set()
        self._shown.set()  # wake the loop so it sees the stop
        self._finished.wait(timeout=2)

    @work(thread=True, exclusive=True, exit_on_error=False, group="device-live")
    def _sample_loop(self, sampler) -> None:
        worker = get_current_worker()
        try:
            while not worker.is_cancelled and not self._stop.is_set():
                self._shown.wait()
                if self._stop.is_set():
                    break
                self.post_message(DeviceSampled(sampler.sample()))
                self._stop.wait(SAMPLE_S)
        finally:
            self._finished.set()

    @on(DeviceSampled)
    def show_sample(self, message: DeviceSampled) -> None:
        self.sample, self.samples = message.sample, self.samples + 1
        self.query_one("#device-live", Static).update(live_table(message.sample))

    def on_resize(self) -> None:
        # the paths are shortened to the width; a pane shown again gets a Resize of the same size
        if self.files is not None and self.size.width != self._files_width:
            self.query_one("#device-files", Static).update(self._files_table(self.files))

    @on(CheckFinished)
    def render_result(self, message: CheckFinished) -> None:
        r = message.result
        if r.id == "environment":
            self.environment = r
            self.render_when_shown("env", lambda: self.query_one("#device-env", Static).update(self._env_table(r)))
        elif r.id == "files":
            self.files = r
            self.render_when_shown(
                "files", lambda: self.query_one("#device-files", Static).update(self._files_table(r))
            )

    @staticmethod
    def _env_table(r) -> Table:
        table = Table(
            title=Text.assemble("Environment  ", status_text(r.status), "  (environment check)"),
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
                if key == "cuda_version" and value is None:
                    shown = Text("none (this torch is built without CUDA)", style="dim")
                else:
                    shown = human_scalar(key, value)
                table.add_row(label, shown)
        if "gpu_name" not in values:
            table.add_row("GPU", Text("none (not a CUDA device)", style="dim"))
        if r.status.value != "pass":
            table.add_row("finding", Text(r.summary))
        return table

    def _files_table(self, r) -> Table:
        rows = r.values.get("files", [])
        workspace = host(self).workspace
        root = str(workspace.root) + "/" if workspace is not None else None
        title = Text.assemble("Files  ", status_text(r.status), "  ", Text(r.summary), "  (files check)")
        if root:
            title.append(f"\npaths relative to {root}", style="dim")
        table = Table(title=title, title_justify="left", box=None, padding=(0, 2, 0, 0), header_style="bold")
        cells = []
        for row in rows:
            status = row["status"]
            role = row["role"] + ("" if row.get("required") else " (opt.)")
            path = row["path"][len(root) :] if root and row["path"].startswith(root) else row["path"]
            size = (
                human_scalar("size", row["size"]) if isinstance(row.get("size"), int) else Text(row.get("size") or "-")
            )
            cells.append(
                (role, Text(f"{FILE_MARK.get(status, '?')} {status}", style=FILE_STYLE.get(status, "")), size, path)
            )
        widths = [max([len(c[i]) if isinstance(c[i], str) else c[i].cell_len for c in cells] + [4]) for i in range(3)]
        self._files_width = self.size.width
        path_w = max(12, (self.size.width or 80) - sum(widths) - 2 * 3 - 3)
        table.add_column("role", no_wrap=True)
        table.add_column("status", no_wrap=True)
        table.add_column("size", justify="right", no_wrap=True)
        table.add_column("path", no_wrap=True)
        for role, status, size, path in cells:
            table.add_row(role, status, size, Text(shorten_left(path, path_w)))
        return table
