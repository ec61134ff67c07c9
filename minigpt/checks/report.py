"""The JSON report (`minigpt check --json`) and `minigpt report diff`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minigpt.checks.result import SCHEMA_VERSION, Report, _jsonable
from minigpt.errors import DataError
from minigpt.io.atomic import atomic_write_text
from minigpt.io.files import os_error, stat_input

MAX_REPORT_BYTES = 64 * 2**20  # a report of every check with its values is a few hundred KB


def _value(report: Report, check_id: str, key: str) -> Any:
    result = report.by_id().get(check_id)
    return None if result is None else result.values.get(key)


def report_to_dict(report: Report) -> dict:
    by_id = report.by_id()
    env = by_id["environment"].values if "environment" in by_id else {}
    ranges = _value(report, "token_range", "splits") or {}
    return _jsonable(
        {
            "schema_version": SCHEMA_VERSION,
            "started_at": report.started_at,
            "environment": env,
            "fault": report.fault,
            "fault_notes": report.fault_notes,
            "only": report.only,
            "judged": [f.to_dict() for f in report.judged],
            "cancelled": report.cancelled,
            "counts": report.counts(),
            "exit_code": report.exit_code,
            "timings": {"total_s": round(report.seconds, 3), **{r.id: round(r.duration_s, 4) for r in report.results}},
            # the debug-report fields, at top level for scripts and CI
            "tokenizer_fingerprint": _value(report, "tokenizer_roundtrip", "fingerprint"),
            "vocab_size": _value(report, "tokenizer_roundtrip", "vocab_size"),
            "token_range": {n: [s["min"], s["max"]] for n, s in ranges.items()} or None,
            "batch_shape": _value(report, "batch_shift", "shape"),
            "initial_loss": _value(report, "initial_loss", "initial_loss"),
            "expected_baseline": _value(report, "initial_loss", "expected_baseline"),
            "gradient_norm": _value(report, "gradients", "global_norm"),
            "missing_gradients": _value(report, "gradients", "missing_gradients"),
            "parameter_update_size": _value(report, "optimizer_update", "update_size"),
            "single_batch_final_loss": _value(report, "single_batch_overfit", "final_loss"),
            "checks": [r.to_dict() for r in report.results],
        }
    )


def write_report(report: Report, path: str | Path) -> None:
    data = report_to_dict(report)
    text = json.dumps(data, indent=2, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # a path with bytes that are not UTF-8 (Python holds them as lone surrogates): every
        # non-ASCII character escaped, so the file is valid UTF-8 JSON that reads back the same path
        text = json.dumps(data, indent=2)
    atomic_write_text(text + "\n", path)


def load_report(path: str | Path) -> dict:
    """A report written by `minigpt check --json`, validated as far as `diff_reports` reads it;
    `DataError` (or `FileSystemError`) naming the path and what is wrong otherwise."""
    path = Path(path)
    st = stat_input(path, "Report", error=DataError, missing=["a typo in the path", "the check run did not finish"])
    if st.st_size > MAX_REPORT_BYTES:
        raise DataError(
            f"Not a minigpt check report: {path} is {st.st_size:,} bytes (a report is a few hundred KB)",
            path=path,
            causes=["another kind of file"],
        )
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise DataError(
            f"Not a JSON report: {path} is too deeply nested (invalid JSON for a report)",
            path=path,
            causes=["another kind of file", "a file written by a buggy or hostile script"],
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(
            f"Not a JSON report: {path} ({exc})", path=path, causes=["an interrupted write", "another kind of file"]
        ) from None
    if not isinstance(data, dict) or "checks" not in data or "schema_version" not in data:
        raise DataError(
            f"Not a minigpt check report: {path} has no schema_version/checks",
            path=path,
            causes=["written by another tool", "an interrupted write"],
        )
    checks = data["checks"]
    if not isinstance(checks, list):
        raise DataError(
            f'Malformed check report: {path}: "checks" is a {type(checks).__name__}, expected a list', path=path
        )
    for i, check in enumerate(checks):
        if not isinstance(check, dict) or not isinstance(check.get("id"), str) or "status" not in check:
            found = type(check).__name__ if not isinstance(check, dict) else f"keys {sorted(map(str, check))[:6]}"
            raise DataError(
                f'Malformed check report: {path}: checks[{i}] should be an object with a string "id" and a '
                f'"status"; found {found}',
                path=path,
                causes=["the report was edited by hand", "written by another tool"],
            )
    return data


TOP_LEVEL = (
    "tokenizer_fingerprint",
    "vocab_size",
    "batch_shape",
    "initial_loss",
    "expected_baseline",
    "gradient_norm",
    "missing_gradients",
    "parameter_update_size",
    "single_batch_final_loss",
    "fault",
)


def diff_reports(a: dict, b: dict) -> dict:
    """Status changes per check, changed top-level fields, and checks only in one report."""
    checks_a = {c["id"]: c for c in a["checks"]}
    checks_b = {c["id"]: c for c in b["checks"]}
    status_changes = [
        {
            "id": cid,
            "from": checks_a[cid]["status"],
            "to": checks_b[cid]["status"],
            "summary_from": checks_a[cid].get("summary"),
            "summary_to": checks_b[cid].get("summary"),
        }
        for cid in checks_a
        if cid in checks_b and checks_a[cid]["status"] != checks_b[cid]["status"]
    ]
    summary_changes = [
        {"id": cid, "from": checks_a[cid].get("summary"), "to": checks_b[cid].get("summary")}
        for cid in checks_a
        if cid in checks_b
        and checks_a[cid]["status"] == checks_b[cid]["status"]
        and checks_a[cid].get("summary") != checks_b[cid].get("summary")
    ]
    fields = [{"field": k, "from": a.get(k), "to": b.get(k)} for k in TOP_LEVEL if a.get(k) != b.get(k)]
    return {
        "status_changes": status_changes,
        "summary_changes": summary_changes,
        "fields": fields,
        "only_in_a": sorted(set(checks_a) - set(checks_b)),
        "only_in_b": sorted(set(checks_b) - set(checks_a)),
    }
