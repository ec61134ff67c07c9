"""Pane 2: renders the environment and files checks' values."""

from __future__ import annotations

import sys
import time

import pytest

from minigpt_tui.panes.device_files import DeviceFilesPane

from .conftest import SIZE, rendered, wait_for_report


async def test_device_pane_shows_versions_device_and_every_file(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        await pilot.press("2")
        pane = app.query_one(DeviceFilesPane)
        values = report.by_id()["environment"].values

        def shown() -> None:
            env = rendered(pane.query_one("#device-env"))
            files = rendered(pane.query_one("#device-files"))
            assert values["torch"] in env and values["python"] in env
            assert "selected device" in env and "cpu" in env
            assert "CUDA available" in env
            assert "tokenizer" in files and "train_ids" in files and "✓ ok" in files
            for row in report.by_id()["files"].values["files"]:
                assert row["role"] in files
            assert pane.files is report.by_id()["files"] or pane.files.values == report.by_id()["files"].values

        await eventually(pilot, shown)


async def test_device_pane_flags_a_missing_file(workspace, make_app):
    (workspace / "data" / "encoded" / "train_ids.pt").unlink()
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("2")  # a hidden pane renders when shown
        files = app.query_one(DeviceFilesPane).query_one("#device-files")

        def flagged() -> None:
            assert "✗ missing" in rendered(files)
            assert "✗ fail" in rendered(files)

        await eventually(pilot, flagged)


# -- the live view, with a fake sampler (no GPU here) and a fake /proc --------------------------
from minigpt_tui.panes.device_files import SAMPLE_S  # noqa: E402
from minigpt_tui.widgets.device_stats import DeviceSample, DeviceSampler  # noqa: E402
from tests.waiting import eventually, stays, wait_until  # noqa: E402

from ._pane_harness import PaneHarness  # noqa: E402

GPU_SAMPLE = DeviceSample(
    sources=["NVML", "torch.cuda", "/proc"],
    gpu_name="NVIDIA H200",
    gpu_used_bytes=40 * 2**30,
    gpu_total_bytes=140 * 2**30,
    allocated_bytes=3 * 2**30,
    reserved_bytes=4 * 2**30,
    gpu_util_percent=87.0,
    temperature_c=61.0,
    cpu_percent=12.5,
    cpus=16,
    mem_used_bytes=10 * 2**30,
    mem_total_bytes=128 * 2**30,
    ui_rss_bytes=300 * 2**20,
    training_pid=4242,
    training_command="train",
    training_rss_bytes=2 * 2**30,
    training_gpu_bytes=6 * 2**30,
)


class FakeSampler:
    calls = 0
    times: list[float] = []  # when each sample was taken (time.monotonic)

    def __init__(self, workspace):
        self.workspace = workspace

    def sample(self) -> DeviceSample:
        FakeSampler.calls += 1
        FakeSampler.times.append(time.monotonic())
        return GPU_SAMPLE


class FakeDevicePane(DeviceFilesPane):
    make_sampler = FakeSampler


async def test_live_view_shows_gpu_memory_load_and_the_training_process(demo_ws):
    async with PaneHarness(FakeDevicePane, demo_ws).run_test(size=(80, 24)) as pilot:
        pane = pilot.app.query_one(DeviceFilesPane)
        await wait_until(pilot, lambda: pane.samples >= 1)
        text = " ".join(rendered(pane.query_one("#device-live")).split())
    assert "from NVML, torch.cuda, /proc" in text  # where the numbers come from
    assert "GPU memory used 40.0 GiB of 140 GiB (29%)" in text
    assert "3.0 GiB allocated, 4.0 GiB reserved" in text
    assert "87% busy, 61 °C" in text and "12% of 16 cores" in text
    assert "training (PID 4242) 2.0 GiB resident, 6.0 GiB on the GPU" in text


@pytest.mark.slow
async def test_live_sampling_is_at_most_once_a_second_and_stops_when_hidden(demo_ws):
    FakeSampler.calls, FakeSampler.times = 0, []
    async with PaneHarness(FakeDevicePane, demo_ws).run_test(size=(80, 24)) as pilot:
        pane = pilot.app.query_one(DeviceFilesPane)
        await wait_until(pilot, lambda: pane.samples >= 1)
        # not again within the second: timed from the sample itself, not from when this test saw it
        await wait_until(pilot, lambda: FakeSampler.calls >= 2, what="the second sample")
        first, second = FakeSampler.times[:2]
        assert second - first >= SAMPLE_S - 0.01, FakeSampler.times
        pane.display = False
        # the sampler's own flag: once the pane has handled its Hide, the loop waits to be shown
        await wait_until(pilot, lambda: not pane._shown.is_set(), what="the pane hidden")
        calls = FakeSampler.calls
        await stays(pilot, lambda: FakeSampler.calls == calls, 1.5, what="no sampling while hidden")


async def _handled(pilot, widget) -> None:
    """Until `widget` has handled every message posted to it so far (a callback queued behind them ran)."""
    done: list[bool] = []
    widget.call_later(done.append, True)
    await wait_until(pilot, lambda: done, what=f"{widget!r} to handle its messages")


def _fake_proc(root, idle: int, total_busy: int, rss_kib: int):
    (root / "self").mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  {total_busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 0 0 1 0 0 0 0 0 0\n")
    (root / "meminfo").write_text("MemTotal:       8000000 kB\nMemFree: 1 kB\nMemAvailable:   6000000 kB\n")
    (root / "self" / "status").write_text(f"Name:\tpython\nVmRSS:\t  {rss_kib} kB\n")


def test_sampler_reads_cpu_memory_and_the_lock_holders_rss_from_proc(tmp_path):
    import os

    from minigpt.io.lock import acquire

    proc, ws = tmp_path / "proc", tmp_path / "ws"
    ws.mkdir()
    _fake_proc(proc, idle=100, total_busy=100, rss_kib=1024)
    (proc / str(os.getpid())).mkdir()
    (proc / str(os.getpid()) / "status").write_text("VmRSS:\t 2048 kB\n")
    sampler = DeviceSampler(ws, proc=proc)
    assert sampler.sample().training_pid is None  # nobody trains
    with acquire(ws, "train"):  # this process plays the trainer
        first = sampler.sample()
    assert first.training_pid == os.getpid() and first.training_rss_bytes == 2048 * 1024
    assert first.mem_used_bytes == 2000000 * 1024 and first.ui_rss_bytes == 1024 * 1024
    assert first.gpu_name is None and first.sources == [str(proc)]
    _fake_proc(proc, idle=150, total_busy=250, rss_kib=1024)  # 150 busy ticks of 200
    assert sampler.sample().cpu_percent == 75.0


def test_sampler_reads_gpu_numbers_from_nvml_and_torch_cuda_when_present(tmp_path, monkeypatch):
    import os
    import types

    from minigpt.io.lock import acquire

    gib = 2**30
    nvml = types.SimpleNamespace(
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: "h0",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=40 * gib, total=140 * gib),
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=87),
        nvmlDeviceGetTemperature=lambda h, sensor: 61,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=os.getpid(), usedGpuMemory=5 * gib)],
    )
    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        mem_get_info=lambda: (100 * gib, 140 * gib),
        get_device_name=lambda: "NVIDIA H200 (torch)",
        memory_allocated=lambda: 3 * gib,
        memory_reserved=lambda: 4 * gib,
    )
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    (tmp_path / "ws").mkdir()
    with acquire(tmp_path / "ws", "train"):  # this process plays the trainer
        sample = DeviceSampler(tmp_path / "ws", proc=tmp_path).sample()
    assert sample.training_pid == os.getpid() and sample.training_gpu_bytes == 5 * gib
    assert sample.sources == ["NVML", "torch.cuda"]
    assert sample.gpu_name == "NVIDIA H200"  # NVML first: it sees every process
    assert (sample.gpu_used_bytes, sample.gpu_total_bytes) == (40 * gib, 140 * gib)
    assert (sample.allocated_bytes, sample.reserved_bytes) == (3 * gib, 4 * gib)  # only torch knows these
    assert (sample.gpu_util_percent, sample.temperature_c) == (87.0, 61.0)

    monkeypatch.delitem(sys.modules, "pynvml")
    monkeypatch.setattr("builtins.__import__", _no_pynvml(__import__))
    sample = DeviceSampler(None, proc=tmp_path).sample()
    assert sample.sources == ["torch.cuda"] and sample.gpu_used_bytes == 40 * gib
    assert sample.gpu_util_percent is None


def _no_pynvml(real_import):
    def fake(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    return fake


def test_an_nvml_reading_the_device_does_not_support_is_skipped_not_fatal(tmp_path, monkeypatch):
    import types

    class NVMLError(Exception):
        pass

    def unsupported(*args):
        raise NVMLError("Not Supported")

    nvml = types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=unsupported)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setitem(
        sys.modules, "torch", types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    )
    sample = DeviceSampler(None, proc=tmp_path).sample()
    assert sample.gpu_name is None and "NVML" not in sample.sources


async def test_the_files_table_is_cut_again_only_when_the_width_changes(workspace, make_app, monkeypatch):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_report(pilot, app)
        await pilot.press("2")
        pane = app.query_one(DeviceFilesPane)
        files = pane.query_one("#device-files")
        await wait_until(pilot, lambda: "train_ids" in rendered(files), what="the files table drawn")
        drawn = rendered(files)
        widest = max(files.render_line(y).cell_length for y in range(files.size.height))
        cuts: list[int] = []
        cut = pane._files_table

        def counted(result):
            cuts.append(pane.size.width)
            return cut(result)

        monkeypatch.setattr(pane, "_files_table", counted)
        # WHEN the pane is left and shown again at the same width THEN its paths are not cut again and
        # the same table is on screen
        await pilot.press("3")
        await wait_until(pilot, lambda: not pane.display or not pane.is_on_screen, what="the pane hidden")
        await pilot.press("2")
        await wait_until(pilot, lambda: pane.is_on_screen and rendered(files) == drawn, what="the pane shown again")
        await _handled(pilot, pane)  # the Resize and Show that came with it
        assert cuts == []
        # WHEN the terminal gets narrower THEN the paths are cut again, to the new width
        await pilot.resize_terminal(60, SIZE[1])  # narrower than the widest row
        await wait_until(pilot, lambda: cuts and cuts[-1] == pane.size.width < SIZE[0], what="the table cut again")
        await wait_until(pilot, lambda: rendered(files) != drawn, what="the narrower table drawn")
        now = max(files.render_line(y).cell_length for y in range(files.size.height))
        assert now <= pane.size.width < widest
