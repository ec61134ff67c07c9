"""`minigpt` command line: one module per subcommand, each with `add_arguments` and `run`.

Exit codes: 0 success (checks: nothing failed), 1 a check failed / training diverged,
2 bad usage, unreadable input or an OS refusal (disk full, read-only, permission denied, not a
directory, is a directory: one line naming the path, no traceback), 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING, TextIO

# first, before any slow import: SIGINT is held back while the command's modules load (see startup)
from minigpt.cli.startup import preload, sigint_held

if TYPE_CHECKING:
    import argparse

# subcommand -> (module, help)
COMMANDS = {
    "prepare": ("minigpt.cli.prepare", "build the tokenizer and encoded splits from text"),
    "train": ("minigpt.cli.train", "train a character-level GPT, writing checkpoints and metrics"),
    "sample": ("minigpt.cli.sample", "generate text from a checkpoint"),
    "check": ("minigpt.cli.check", "run the diagnostic checks (JSON report, CI exit codes)"),
    "report": ("minigpt.cli.report", "work with JSON check reports (diff)"),
    "import": ("minigpt.cli.importer", "open a nanoGPT run (ckpt.pt, meta.pkl, train/val.bin) as a workspace"),
}


def build_parser() -> argparse.ArgumentParser:
    import argparse
    import importlib

    from minigpt import __version__

    parser = argparse.ArgumentParser(
        prog="minigpt",
        description="Prepare text, train a small character-level GPT, sample from it and check why it trains badly.",
        epilog="exit codes: 0 success, 1 a check failed or training diverged, 2 bad input, 130 interrupted. "
        "`minigpt COMMAND --help` for a command's options; `minigpt-tui` opens the inspector.",
    )
    parser.add_argument("--version", action="version", version=f"minigpt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--workspace", default=".", help="run folder (default: current directory)")
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE  # 141: the status of a writer whose reader went away (`yes | head`)
TAKE_SIGINT = "MINIGPT_TAKE_SIGINT"  # set by a parent that stops us with SIGINT (the UI's training run)


def take_sigint() -> None:
    """A process started with SIGINT ignored (`nohup … &`, a shell script's `&`) keeps it ignored,
    and then the UI's stop (SIGINT, like Ctrl+C: finish the save in progress) does nothing. Only
    when the parent asks: a script's background job is meant to ignore the terminal's Ctrl+C."""
    if os.environ.get(TAKE_SIGINT) == "1" and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: list[str] | None = None) -> int:
    stdout_at_start = None
    try:  # from the first line: a Ctrl-C that lands before SIGINT is held back is still "interrupted", 130
        take_sigint()
        if sys.stdout is None:  # started with stdout closed (`>&-`): what it would print goes nowhere
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  the process's stdout, open until exit
        stdout_at_start = _fd_identity(sys.stdout)
        with sigint_held() as interrupted:  # Ctrl-C during the imports: noted, acted on once they are done
            import io

            from minigpt.errors import MiniGPTError
            from minigpt.io.files import os_error

            for stream in (sys.stdout, sys.stderr):  # an ASCII/Latin-1 terminal gets \u2713, never a traceback
                if isinstance(stream, io.TextIOWrapper):
                    stream.reconfigure(errors="backslashreplace")
            parser = build_parser()
            args = parser.parse_args(argv)
            preload(args.command)
        if interrupted:
            raise KeyboardInterrupt
        return int(args._run(args) or 0)
    except KeyboardInterrupt:  # first: the other clauses name what the block imports
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `minigpt sample | head -c 10`: the reader is gone; end quietly, as `yes | head`
        _silence_stdout()
        return BROKEN_PIPE_EXIT
    except SystemExit as exc:  # rich ends a write into a closed pipe with SystemExit(1) after silencing stdout
        if exc.code == 1 and stdout_at_start is not None and _fd_identity(sys.stdout) is None:
            return BROKEN_PIPE_EXIT
        raise
    except MiniGPTError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # one the library did not type itself: classified by errno
        print(f"error: {os_error(exc, action='access')}", file=sys.stderr)
        return 2


def _fd_identity(stream: TextIO) -> tuple[int, int] | None:
    """(device, inode) of what `stream`'s descriptor is, or None (no descriptor, or it is /dev/null)."""
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is a ValueError and an OSError
        return None
    found = (st.st_dev, st.st_ino)
    return None if found == _devnull_identity() else found


def _devnull_identity() -> tuple[int, int]:
    st = os.stat(os.devnull)
    return (st.st_dev, st.st_ino)


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the flush at exit would hit the broken pipe again and print a traceback."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stdout without a descriptor: nothing to flush into a pipe
        pass


if __name__ == "__main__":
    sys.exit(main())
