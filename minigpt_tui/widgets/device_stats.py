"""A live view of the machine for the Device & files pane, sampled at most once a second.

GPU numbers come from NVML (`pynvml`, optional) or `torch.cuda` when torch is already imported
(never imported here: it would hold the GIL for seconds); CPU, memory and the training process's
resident memory come from /proc. Each sample names its sources. Pure Python, no UI.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DeviceSample:
    sources: list[str] = field(default_factory=list)  # where the numbers came from, in words
    gpu_name: str | None = None
    gpu_used_bytes: int | None = None  # whole device, every process
    gpu_total_bytes: int | None = None
    allocated_bytes: int | None = None  # this process's tensors (torch caching allocator)
    reserved_bytes: int | None = None
    gpu_util_percent: float | None = None
    temperature_c: float | None = None
    cpu_percent: float | None = None  # all cores, since the previous sample
    cpus: int | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    ui_rss_bytes: int | None = None
    training_pid: int | None = None  # the process holding the workspace lock
    training_command: str | None = None
    training_rss_bytes: int | None = None
    training_gpu_bytes: int | None = None  # NVML's per-process figure


def _kib_field(text: str, name: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(name + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


class DeviceSampler:
    """Call `sample()` from a worker thread; keeps the previous CPU counters for utilisation."""

    def __init__(self, workspace: str | os.PathLike | None = None, proc: str | os.PathLike = "/proc"):
        self.workspace = Path(workspace) if workspace is not None else None
        self.proc = Path(proc)
        self._cpu_prev: tuple[int, int] | None = None
        self._nvml: Any = None  # the pynvml module once initialised, False when unavailable

    def _read(self, *parts: str) -> str | None:
        try:
            return self.proc.joinpath(*parts).read_text()
        except OSError:
            return None

    def _cpu(self) -> float | None:
        text = self._read("stat")
        if not text or not text.startswith("cpu "):
            return None
        ticks = [int(x) for x in text.splitlines()[0].split()[1:] if x.isdigit()]
        idle, total = ticks[3] + (ticks[4] if len(ticks) > 4 else 0), sum(ticks)
        prev, self._cpu_prev = self._cpu_prev, (idle, total)
        if prev is None or total <= prev[1]:
            return None  # the first sample has nothing to compare with
        return 100.0 * (1 - (idle - prev[0]) / (total - prev[1]))

    def _training(self) -> tuple[int | None, str | None, int | None]:
        if self.workspace is None:
            return None, None, None
        from minigpt.io.lock import holder  # pure Python

        held = holder(self.workspace)
        if held is None:
            return None, None, None
        status = self._read(str(held.pid), "status")
        return held.pid, held.command, _kib_field(status, "VmRSS") if status else None

    def _gpu_nvml(self) -> dict:
        if self._nvml is None:
            try:
                import pynvml  # optional: nvidia-ml-py

                pynvml.nvmlInit()
                self._nvml = pynvml
            except Exception:  # ImportError, or NVMLError: no driver on this machine
                self._nvml = False
        if not self._nvml:
            return {}
        nv = self._nvml
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(0)
            mem = nv.nvmlDeviceGetMemoryInfo(handle)
            name = nv.nvmlDeviceGetName(handle)
            return {
                "gpu_name": name.decode() if isinstance(name, bytes) else str(name),
                "gpu_used_bytes": int(mem.used),
                "gpu_total_bytes": int(mem.total),
                "gpu_util_percent": float(nv.nvmlDeviceGetUtilizationRates(handle).gpu),
                "temperature_c": float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)),
            }
        except getattr(nv, "NVMLError", ()):  # a reading this device does not support: skip this sample's
            return {}

    def _nvml_process_bytes(self, pid: int) -> int | None:
        nv = self._nvml
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(nv.nvmlDeviceGetHandleByIndex(0))
        except getattr(nv, "NVMLError", ()):  # not supported on this device or driver
            return None
        for proc in procs:
            if proc.pid == pid and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
        return None

    @staticmethod
    def _gpu_torch() -> dict:
        torch = sys.modules.get("torch")  # only if the checks already imported it
        # only where this process already uses CUDA: a first call would create a context (hundreds of MB)
        if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return {}
        free, total = torch.cuda.mem_get_info()
        return {
            "gpu_name": torch.cuda.get_device_name(),
            "gpu_used_bytes": int(total - free),
            "gpu_total_bytes": int(total),
            "allocated_bytes": int(torch.cuda.memory_allocated()),
            "reserved_bytes": int(torch.cuda.memory_reserved()),
        }

    def sample(self) -> DeviceSample:
        values: dict = {}
        sources = []
        nvml = self._gpu_nvml()
        if nvml:
            values.update(nvml)
            sources.append("NVML")
        cuda = self._gpu_torch()
        if cuda:
            values.update({k: v for k, v in cuda.items() if k not in values})
            sources.append("torch.cuda")
        values["cpu_percent"] = self._cpu()
        values["cpus"] = os.cpu_count()
        meminfo = self._read("meminfo")
        if meminfo:
            total, available = _kib_field(meminfo, "MemTotal"), _kib_field(meminfo, "MemAvailable")
            values["mem_total_bytes"] = total
            values["mem_used_bytes"] = total - available if total is not None and available is not None else None
        own = self._read("self", "status")
        values["ui_rss_bytes"] = _kib_field(own, "VmRSS") if own else None
        values["training_pid"], values["training_command"], values["training_rss_bytes"] = self._training()
        if nvml and values["training_pid"] is not None:
            values["training_gpu_bytes"] = self._nvml_process_bytes(values["training_pid"])
        if meminfo or own:
            sources.append(str(self.proc))
        return DeviceSample(sources=sources, **values)
