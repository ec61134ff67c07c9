"""`minigpt check`: run the diagnostics in pipeline order; exit 0 (no failure), 1 (a check failed), 2 (bad input)."""

from __future__ import annotations

import argparse

from minigpt.checks.control import CheckEvent, Finished
from minigpt.checks.faults import FAULTS
from minigpt.checks.flags import add_check_arguments, option_values
from minigpt.train.option_ranges import parser_for


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_check_arguments(p)
    p.add_argument("--only", help="comma-separated check ids (their dependencies run too)")
    p.add_argument("--skip", help="comma-separated check ids to skip")
    p.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here")
    p.add_argument(
        "--check-timeout",
        type=parser_for("--check-timeout"),
        default=600.0,
        metavar="S",
        help="with --model: seconds a check may take before it is an error (default 600)",
    )
    p.add_argument(
        "--no-isolate",
        action="store_true",
        help="with --model: run your model's code in this process (no time budget, no crash protection)",
    )
    p.add_argument("--list", action="store_true", help="list the checks and faults, then exit")
    p.add_argument("--verbose", "-v", action="store_true", help="show causes and fixes for warnings too, and notes")


def _preflight_hf_size(args: argparse.Namespace, config: dict | None) -> None:
    """`--model hf:PATH` (or `transformers:...` with --config): a config whose own fields already put
    the model past the machine (millions of layers, a vocabulary of 10**11) is refused now, exit 2 with
    the estimate, before the checks start; the full count on the meta device is made where it is built.
    Reads the JSON only: transformers is imported where the checks run."""
    from pathlib import Path

    from minigpt.model.hf_sizing import require_config_plausible
    from minigpt.model.user import read_hf_config

    spec = args.model_spec or ""
    if config is not None and spec.startswith(("hf:", "transformers:")):
        require_config_plausible(config, f"--config {args.config_path}")
    elif config is None and spec.startswith("hf:"):
        path = Path(spec[3:]).expanduser().resolve() / "config.json"
        if path.is_file():  # else the spec's own loading says what is missing
            require_config_plausible(read_hf_config(path, lead=f"--model {spec}: "), path)


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def run(args: argparse.Namespace) -> int:
    if args.list:
        return _run(args)  # torch-free
    from minigpt.model.memory import large_allowed

    with large_allowed(args.allow_large):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    import os

    from rich.console import Console
    from rich.markup import escape
    from rich.text import Text

    from minigpt.checks import CheckContext, CheckOptions, catalog, run_checks
    from minigpt.checks.report import write_report
    from minigpt.cli.check_lines import ResultLines
    from minigpt.cli.output import hanging, wrap_width

    # emoji=False: a path like `syntax.py:M` must not print as `syntax.pyⓂ` (rich's `:name:` codes)
    console = Console(highlight=False, soft_wrap=True, emoji=False)
    # where --json goes, fixed now: code in a --model may chdir before the report is written
    json_path = os.path.abspath(os.path.expanduser(args.json_path)) if args.json_path else None
    if args.list:
        for cid, info in catalog().items():
            console.print(f"{cid:<24} {info.stage:<13} {escape(info.title)}")
        console.print("\nfaults for --inject:")
        for f in FAULTS.values():
            console.print(f"{f.name:<24} trips {f.intended:<24} {escape(f.description)}")
        return 0
    options = CheckOptions(workspace=args.workspace, **option_values(args))
    from minigpt.device import resolve_device

    # bad usage is exit 2, not a failed check: an unavailable device, an unreadable --config,
    # a fault that cannot be injected into the given model
    resolve_device(args.device)
    from minigpt.threads import apply as apply_thread_policy

    apply_thread_policy("checks")
    ctx = CheckContext(options)
    config = ctx.base_config() if args.config_path else None
    if config is not None and not args.model_spec:  # sized now (exit 2 with the figure), not when a check builds it
        from minigpt.model.factory import require_buildable

        require_buildable(config, f"--config {args.config_path}")
    _preflight_hf_size(args, config)
    refusal = FAULTS[args.inject].refuse_for_user_model() if args.inject else None
    if refusal and args.model_spec:
        from minigpt.errors import ConfigError

        raise ConfigError(refusal)
    err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True)
    if args.inject:
        err.print(f"[yellow]injecting fault[/] {args.inject}: {escape(FAULTS[args.inject].description)}")

    lines = ResultLines(console, verbose=args.verbose, workspace=ctx.ws)

    def listener(event: CheckEvent) -> None:
        if isinstance(event, Finished):
            lines.add(event.result)

    if args.model_spec and not args.no_isolate:
        # code nobody here wrote runs in a child process with a time budget per check: a hang or
        # os._exit() in it is an error result, never a hung or falsely green `minigpt check`
        from minigpt.checks.sandbox import run_checks_isolated

        report = run_checks_isolated(
            options, only=_split(args.only), skip=_split(args.skip), listener=listener, timeout_s=args.check_timeout
        )
    else:
        report = run_checks(ctx, only=_split(args.only), skip=_split(args.skip), listener=listener)
    lines.finish()
    counts = {k: f"{n} {k}" for k, n in report.counts().items() if n}
    if lines.expected_warnings:
        shown = "" if lines.expected_warnings == report.counts()["warn"] else f"{lines.expected_warnings} "
        counts["warn"] += f" ({shown}expected for the demo)"
    console.print(f"\n{len(report.results)} checks in {report.seconds:.1f}s: " + ", ".join(counts.values()))
    for judged in report.judged:
        if judged.role in ("checkpoint", "metrics"):
            head = Text(f"judged {judged.role}: ", style="dim")
            console.print(hanging(head, Text(judged.describe(), style="dim"), wrap_width(console)))
    if report.fault_notes:
        err.print("fault applied: " + escape("; ".join(report.fault_notes)))
    if json_path:
        write_report(report, json_path)
        err.print(f"report written to {escape(json_path)}")
    if any(r.values.get("bad_usage") for r in report.results):
        return 2  # a bad --model/--config (e.g. the file does not import) is bad usage, not a failed check
    return report.exit_code
