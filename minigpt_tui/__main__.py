"""`minigpt-tui`: the full-screen inspector (also `python -m minigpt_tui`)."""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before textual loads: time to first paint counts from here

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    from minigpt import __version__  # minigpt/__init__.py is a constant: no torch

    p = argparse.ArgumentParser(prog="minigpt-tui", description="Find out why a small GPT trains badly.")
    p.add_argument("--version", action="version", version=f"minigpt-tui {__version__}")
    p.add_argument("--workspace", default=".", help="run folder (default: current directory)")
    from minigpt.checks.flags import add_check_arguments  # torch-free

    add_check_arguments(p, ui=True)
    p.add_argument(
        "--demo",
        action="store_true",
        help="open the demo workspace (built and briefly trained in the cache folder on first use)",
    )
    p.add_argument("--timings", action="store_true", help="print time to first paint and to all checks done on exit")
    return p


def main(argv: list[str] | None = None) -> int:
    from minigpt.errors import MiniGPTError  # no torch

    try:
        args = build_parser().parse_args(argv)  # --help and --version answer without a terminal
    except MiniGPTError as exc:  # a number outside its option's range (minigpt.train.option_ranges)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = [name for name, stream in (("input", sys.stdin), ("output", sys.stdout)) if not _is_terminal(stream)]
    # TEXTUAL_DRIVER names a driver that is no terminal's (textual-serve's web driver speaks over
    # the pipes it is given): only Textual's own terminal driver needs a terminal
    if missing and not os.environ.get("TEXTUAL_DRIVER"):
        print(
            f"error: minigpt-tui needs a terminal, and its standard {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not one (</dev/null, >file, a pipe, cron); run it in a "
            "terminal, or `minigpt check --workspace ...` for the same checks as text",
            file=sys.stderr,
        )
        return 2
    from minigpt.checks.flags import option_values
    from minigpt_tui.app import MiniGPTApp

    app = MiniGPTApp(args.workspace, demo_mode=args.demo, started_at=STARTED, **option_values(args))
    app.run()
    if args.timings:
        for name, seconds in app.timings.items():
            print(f"{name}: {seconds:.2f}s", file=sys.stderr)
    return app.return_code or 0


def _is_terminal(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # a closed stream
        return False


if __name__ == "__main__":
    sys.exit(main())
