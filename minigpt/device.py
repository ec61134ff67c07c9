"""Device selection: `auto` prefers CUDA, then MPS, then CPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from minigpt.errors import ConfigError

if TYPE_CHECKING:
    import torch

DEVICE_CHOICES = ("auto", "cpu", "cuda", "mps")


def mps_available() -> bool:
    import torch  # here, not at the top: `minigpt --help` and the UI's first frame import this module

    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def resolve_device(name: str = "auto") -> torch.device:
    import torch

    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("mps" if mps_available() else "cpu")
    kind = name.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"--device {name}: CUDA is not available in this torch build or on this machine")
    if kind == "mps" and not mps_available():
        raise ConfigError(f"--device {name}: MPS is not available on this machine")
    if kind not in DEVICE_CHOICES:
        raise ConfigError(f"--device {name}: expected one of {', '.join(DEVICE_CHOICES)}")
    return torch.device(name)


@contextlib.contextmanager
def tf32_matmuls(device: torch.device) -> Iterator[None]:
    """TensorFloat-32 matmuls on CUDA for the run (Ampere and later: several times the float32 rate at
    a precision training does not notice); the process's setting comes back afterwards."""
    import torch

    if device.type != "cuda":
        yield
        return
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(previous)
