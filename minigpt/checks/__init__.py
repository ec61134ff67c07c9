"""The check engine: each diagnostic isolates one assumption of the training pipeline.

Importing this package is cheap and torch-free: the metadata (`catalog`, `ordered_ids`, `Status`,
`CheckResult`, `Report`, `FAULTS`, `CheckOptions`) loads in milliseconds. The runnable parts
(`CheckContext`, `run_checks`) import torch and are loaded on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt.checks.control import Cancelled, CheckRun
from minigpt.checks.faults import FAULTS, Fault
from minigpt.checks.options import CheckOptions, ResolvedInputs
from minigpt.checks.registry import STAGES, CheckInfo, catalog, ordered_ids, resolve_selection
from minigpt.checks.result import SCHEMA_VERSION, CheckResult, FileIdentity, Report, Status

if TYPE_CHECKING:
    from minigpt.checks.context import CheckContext
    from minigpt.checks.engine import run_checks

_LAZY = {"CheckContext": "context", "run_checks": "engine"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FAULTS",
    "SCHEMA_VERSION",
    "STAGES",
    "Cancelled",
    "CheckContext",
    "CheckInfo",
    "CheckOptions",
    "CheckResult",
    "CheckRun",
    "Fault",
    "FileIdentity",
    "Report",
    "ResolvedInputs",
    "Status",
    "catalog",
    "ordered_ids",
    "resolve_selection",
    "run_checks",
]
