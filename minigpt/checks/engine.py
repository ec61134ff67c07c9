"""Runs a selection of checks in pipeline order, with progress callbacks and cancellation.

Used by `minigpt check` and by the terminal UI; imports neither rich nor textual.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import ConfigError, MiniGPTError, ModelSpecError
from .adapter import ModelContractError
from .context import CheckContext
from .registry import CHECKS, ordered_ids
from .result import CheckResult, Outcome, Status

SCHEMA_VERSION = 1

# listener(kind, payload): ("started", (check_id, index, total)), ("progress", (check_id, fraction)),
# ("finished", (CheckResult, index, total))
Listener = Callable[[str, tuple], None]


class Cancelled(Exception):
    pass


@dataclass
class Report:
    results: list[CheckResult]
    fault: str | None = None
    fault_notes: list[str] = field(default_factory=list)
    started_at: float = 0.0
    seconds: float = 0.0
    cancelled: bool = False
    shared: dict = field(default_factory=dict)

    def by_id(self) -> dict[str, CheckResult]:
        return {r.id: r for r in self.results}

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status in (Status.FAIL, Status.ERROR)]

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[r.status.value] += 1
        return out


def resolve_selection(only: list[str] | None = None, skip: list[str] | None = None) -> tuple[list[str], set[str]]:
    """The ids to run in pipeline order (dependencies of `only` pulled in) and those skipped by request."""
    order = ordered_ids()
    unknown = [i for i in (only or []) + (skip or []) if i not in CHECKS]
    if unknown:
        raise ConfigError(f"unknown check id(s): {unknown}; known: {', '.join(order)}")
    wanted = set(order)
    if only:
        wanted = set()
        stack = list(only)
        while stack:
            cid = stack.pop()
            if cid not in wanted:
                wanted.add(cid)
                stack.extend(CHECKS[cid].depends)
    skipped = set(skip or [])
    return [i for i in order if i in wanted], skipped


def run_checks(
    ctx: CheckContext,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
) -> Report:
    ids, skipped = resolve_selection(only, skip)
    listener = listener or (lambda kind, payload: None)
    cancel = cancel or threading.Event()
    report = Report(results=[], fault=ctx.fault, started_at=time.time())
    statuses: dict[str, Status] = {}
    t_run = time.perf_counter()
    for index, cid in enumerate(ids):
        if cancel.is_set():
            report.cancelled = True
            break
        spec = CHECKS[cid]
        listener("started", (cid, index, len(ids)))
        ctx.raise_if_cancelled = lambda: _raise_if(cancel)
        ctx.report_progress = lambda fraction, _cid=cid: listener("progress", (_cid, fraction))
        blocked = [d for d in spec.depends if d in statuses and statuses[d].blocks_dependents]
        t0 = time.perf_counter()
        if cid in skipped:
            result = CheckResult(cid, spec.stage, Status.SKIP, "skipped (--skip)")
        elif blocked:
            result = CheckResult(
                cid, spec.stage, Status.SKIP, f"skipped: {', '.join(f'{d} {statuses[d].value}' for d in blocked)}"
            )
        else:
            try:
                result = _run_one(spec, ctx)
            except Cancelled:
                report.cancelled = True
                break
        if cid in skipped:
            statuses[cid] = Status.PASS  # skipped on request: do not block dependents
        else:
            statuses[cid] = result.status
        result.duration_s = time.perf_counter() - t0
        report.results.append(result)
        listener("finished", (result, index, len(ids)))
    report.seconds = time.perf_counter() - t_run
    report.fault_notes = list(ctx.fault_notes)
    report.shared = ctx.shared
    return report


def _raise_if(cancel: threading.Event) -> None:
    if cancel.is_set():
        raise Cancelled()


def _run_one(spec, ctx: CheckContext) -> CheckResult:
    try:
        summary, values = spec.fn(ctx)
        return CheckResult(spec.id, spec.stage, Status.PASS, summary, values=values)
    except Cancelled:
        raise
    except Outcome as out:
        return CheckResult(
            spec.id, spec.stage, out.status, out.summary, values=out.values, causes=out.causes, fixes=out.fixes
        )
    except (ModelSpecError, ConfigError) as exc:
        return CheckResult(
            spec.id,
            spec.stage,
            Status.ERROR,
            exc.message,
            causes=exc.causes,
            fixes=["fix the --model/--config/--device argument"],
        )
    except MiniGPTError as exc:  # a file this check reads is bad: that is the finding
        return CheckResult(
            spec.id,
            spec.stage,
            Status.FAIL,
            exc.message,
            causes=exc.causes,
            values={"path": exc.path} if exc.path else {},
        )
    except ModelContractError as exc:
        return CheckResult(
            spec.id,
            spec.stage,
            Status.FAIL,
            f"model contract: {exc}",
            causes=["forward must be forward(idx, targets=None) -> (logits, loss)"],
        )
    except Exception as exc:  # the check could not run: show where, never a bare traceback
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{frame.filename}:{frame.lineno}"
        return CheckResult(
            spec.id,
            spec.stage,
            Status.ERROR,
            f"{type(exc).__name__}: {exc}"[:400],
            causes=[f"raised at {where}: {frame.line}"],
            fixes=["if this is in your model file, fix it there; otherwise report a bug"],
        )
