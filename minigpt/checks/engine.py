"""Runs a selection of checks in pipeline order, with progress callbacks and cancellation.

Used by `minigpt check` and by the terminal UI; imports neither rich nor textual.
"""

from __future__ import annotations

import threading
import time
import traceback

from minigpt.checks.context import CheckContext
from minigpt.checks.control import Cancelled, CheckRun, Finished, Listener, Started
from minigpt.checks.registry import BLOCKED_REASONS, Check, implementations, resolve_selection
from minigpt.checks.result import SCHEMA_VERSION, CheckResult, Outcome, Report, Status
from minigpt.errors import ConfigError, MiniGPTError, ModelSpecError
from minigpt.model.contract import ModelContractError

__all__ = ["SCHEMA_VERSION", "Cancelled", "Listener", "Report", "run_checks"]


def run_checks(
    ctx: CheckContext,
    only: list[str] | None = None,
    skip: list[str] | None = None,
    listener: Listener | None = None,
    cancel: threading.Event | None = None,
    done: list[CheckResult] | None = None,
) -> Report:
    """Run the selection in pipeline order. `done`: results from an earlier part of this same run
    (the sandbox restarts a run after a check killed its process); they are kept, not re-run."""
    ids, skipped = resolve_selection(only, skip)
    finished = {r.id: r for r in done or []}
    specs = implementations()
    listener = listener or (lambda event: None)
    cancel = cancel or threading.Event()
    ctx.refresh()  # files that changed since the last run are read again
    report = Report(results=[], fault=ctx.fault_name, started_at=time.time(), only=list(only) if only else None)
    statuses: dict[str, Status] = {}
    t_run = time.perf_counter()
    for index, cid in enumerate(ids):
        if cancel.is_set():
            report.cancelled = True
            break
        spec = specs[cid]
        if cid in finished:
            statuses[cid] = Status.PASS if cid in skipped else finished[cid].status
            report.results.append(finished[cid])
            ctx.earlier[cid] = finished[cid]
            continue
        listener(Started(cid, index, len(ids)))
        blocked = [d for d in spec.depends if d in statuses and statuses[d].blocks_dependents]
        t0 = time.perf_counter()
        if cid in skipped:
            result = CheckResult(cid, spec.stage, Status.SKIP, "skipped (--skip)")
        elif blocked:
            asked = BLOCKED_REASONS[cid](ctx, blocked) if cid in BLOCKED_REASONS else None
            result = CheckResult(
                cid,
                spec.stage,
                Status.SKIP,
                asked or f"skipped: {', '.join(f'{d} {statuses[d].value}' for d in blocked)}",
                # the checks it waited on, for views that group a cascade; a check the user asked for
                # keeps a line of its own, saying why in words they can act on
                values={"blocked_by": blocked, "asked_for": True} if asked else {"blocked_by": blocked},
            )
        else:
            try:
                result = _run_one(spec, ctx, CheckRun(cid, cancel, listener))
            except Cancelled:
                report.cancelled = True
                break
        # skipped on request: do not block dependents
        statuses[cid] = Status.PASS if cid in skipped else result.status
        result.duration_s = time.perf_counter() - t0
        report.results.append(result)
        ctx.earlier[cid] = result
        listener(Finished(result, index, len(ids)))
    report.seconds = time.perf_counter() - t_run
    report.fault_notes = list(ctx.fault_notes)
    report.judged = ctx.judged_files()
    return report


def _run_one(spec: Check, ctx: CheckContext, run: CheckRun) -> CheckResult:
    try:
        summary, values = spec.fn(ctx, run)
        return CheckResult(spec.id, spec.stage, Status.PASS, summary, values=values)
    except Cancelled:
        raise
    except SystemExit as exc:  # sys.exit() in the user's model code must not end `minigpt check`
        return CheckResult(
            spec.id,
            spec.stage,
            Status.ERROR,
            f"the model code called sys.exit({exc.code!r}) during {spec.id} ({spec.title})",
            causes=["a sys.exit()/exit()/quit() in the model file or in code it calls"],
            fixes=["raise an exception instead of exiting; the checks report it with its line"],
        )
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
            values={"bad_usage": True},  # the CLI exits 2: the arguments are wrong, not the model
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
