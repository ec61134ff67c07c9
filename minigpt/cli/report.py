"""`minigpt report diff A.json B.json`: what changed between two check reports."""

from __future__ import annotations

import argparse
import json


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="report_command", required=True, metavar="ACTION")
    d = sub.add_parser("diff", help="show what changed between two JSON reports")
    d.add_argument("a", help="the earlier report")
    d.add_argument("b", help="the later report")
    d.add_argument("--json", action="store_true", help="print the difference as JSON")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from minigpt.checks.report import diff_reports, load_report
    from minigpt.cli.output import hanging, wrap_width

    a, b = load_report(args.a), load_report(args.b)
    for path, report in ((args.a, a), (args.b, b)):
        _require_statuses(path, report)
    diff = diff_reports(a, b)
    if args.json:
        print(json.dumps(diff, indent=2, ensure_ascii=False))
        return 0
    console = Console(soft_wrap=True, highlight=False, markup=False, emoji=False)
    width = wrap_width(console)

    def entry(name: str, text: str) -> None:
        """`check: what changed`, continued 4 columns in."""
        console.print(hanging("", f"{name}: {text}", width, indent=4))

    def detail(label: str, text: str | None) -> None:
        """`    now: text` under its entry, continued under its text; nothing for a report that
        holds no summary for the check."""
        if text is not None:
            console.print(hanging(f"    {label}: ", str(text), width))

    if not any(diff.values()):
        print("no differences")
        return 0
    for ids, c in _grouped(diff["status_changes"], ("from", "to", "summary_from", "summary_to")):
        entry(ids, f"{c['from']} -> {c['to']}")
        detail("was", c["summary_from"])
        detail("now", c["summary_to"])
    for ids, c in _grouped(diff["summary_changes"], ("from", "to")):
        entry(ids, str(c["from"]))
        detail("now", str(c["to"]))
    for f in diff["fields"]:
        entry(f["field"], f"{f['from']!r} -> {f['to']!r}")
    for side in ("only_in_a", "only_in_b"):
        if diff[side]:
            entry(side.replace("_", " "), ", ".join(diff[side]))
    return 0


def _grouped(changes: list[dict], keys: tuple[str, ...]) -> list[tuple[str, dict]]:
    """Changes that read the same for several checks (the loop checks' skip, naming another
    folder) once, named together, in the order they first appear: `(names, change)`."""
    from minigpt.checks.result import name_list

    groups: dict[tuple, tuple[list[str], dict]] = {}
    for c in changes:
        groups.setdefault(tuple(str(c[k]) for k in keys), ([], c))[0].append(c["id"])
    return [(ids[0] if len(ids) == 1 else f"{len(ids)} checks ({name_list(ids)})", c) for ids, c in groups.values()]


def _require_statuses(path: str, report: dict) -> None:
    """Every check's status is one the engine writes: a NaN, a number or another word cannot be
    compared, so the diff is refused (exit 2) naming the file and the check."""
    from minigpt.checks.result import Status
    from minigpt.errors import DataError

    known = {s.value for s in Status}
    for i, check in enumerate(report["checks"]):
        status = check["status"]
        if not isinstance(status, str) or status not in known:
            raise DataError(
                f"Malformed check report: {path}: checks[{i}] ({check['id']}) has status {status!r}, expected one "
                f"of {', '.join(sorted(known))}; the reports cannot be compared",
                path=path,
                causes=["the report was edited by hand", "written by another tool"],
            )
