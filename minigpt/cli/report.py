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
    from minigpt.checks.report import diff_reports, load_report

    diff = diff_reports(load_report(args.a), load_report(args.b))
    if args.json:
        print(json.dumps(diff, indent=2, ensure_ascii=False))
        return 0
    if not any(diff.values()):
        print("no differences")
        return 0
    for c in diff["status_changes"]:
        print(f"{c['id']}: {c['from']} -> {c['to']}\n    was: {c['summary_from']}\n    now: {c['summary_to']}")
    for c in diff["summary_changes"]:
        print(f"{c['id']}: {c['from']!s}\n    now: {c['to']}")
    for f in diff["fields"]:
        print(f"{f['field']}: {f['from']!r} -> {f['to']!r}")
    for side in ("only_in_a", "only_in_b"):
        if diff[side]:
            print(f"{side.replace('_', ' ')}: {', '.join(diff[side])}")
    return 0
