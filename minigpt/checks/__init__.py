"""The check engine: each diagnostic isolates one assumption of the training pipeline."""

from .context import CheckContext, CheckOptions
from .engine import SCHEMA_VERSION, Report, resolve_selection, run_checks
from .faults import FAULTS
from .registry import CHECKS, ordered_ids
from .result import CheckResult, Status

__all__ = [
    "CheckContext",
    "CheckOptions",
    "CheckResult",
    "Status",
    "Report",
    "run_checks",
    "resolve_selection",
    "FAULTS",
    "CHECKS",
    "ordered_ids",
    "SCHEMA_VERSION",
]
