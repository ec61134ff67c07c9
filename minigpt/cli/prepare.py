"""`minigpt prepare --source SRC`: build the tokenizer and the encoded splits of a workspace."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--source",
        required=True,
        metavar="SRC",
        help="a WikiText-2 folder (wiki.{train,valid,test}.tokens or .raw), a UTF-8 text file "
        "(split 90/5/5 by characters at line boundaries), or `demo` (Python's bundled "
        "documentation, no download; write ./demo for a file named demo)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing, different tokenizer (invalidates every checkpoint trained with it)",
    )


SHOWN_CHARS = 20


def describe_files(files: list[str]) -> str:
    """`wiki.train.tokens, wiki.valid.tokens in /data/wikitext-2`: one folder named once."""
    if not files:
        return "Python's pydoc topics"
    folders = {str(Path(f).parent) for f in files}
    if len(folders) == 1:
        return ", ".join(Path(f).name for f in files) + f" in {folders.pop()}"
    return ", ".join(files)


def show_chars(chars: list[str], limit: int = SHOWN_CHARS) -> str:
    """Characters one by one, space-separated, without quotes: `# ^ ¥`; whitespace and control
    characters by name or code point (`U+00A0`), so a `'` or `)` in the list cannot read as
    Python syntax."""

    def one(ch: str) -> str:
        if ch == " ":
            return "space"
        if not ch.isprintable() or ch.isspace():
            return f"U+{ord(ch):04X}"
        return ch

    shown = " ".join(one(c) for c in chars[:limit])
    return shown + (f" … (+{len(chars) - limit} more)" if len(chars) > limit else "")


def run(args: argparse.Namespace) -> int:
    import time

    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from minigpt.cli.startup import STARTED

    started = STARTED  # the imports before the command ran (torch, seconds on a first run) count too
    console = Console()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        # torch takes seconds to import on a first run: the bar says so rather than sitting silent
        task = bar.add_task("loading torch", total=None)  # no total: a pulsing bar
        from minigpt.data.prepare import prepare_workspace  # imports torch: not for --help
        from minigpt.threads import apply as apply_thread_policy

        apply_thread_policy("prepare")  # like every command: one policy for torch's threads
        loaded = time.perf_counter()
        bar.update(task, total=1.0)
        summary = prepare_workspace(
            args.source,
            args.workspace,
            force=args.force,
            progress=lambda stage, fraction: bar.update(task, description=stage, completed=fraction),
        )

    console.print(f"source      {summary.source_kind}: {escape(describe_files(summary.source_files))}")
    beyond = summary.chars_beyond_train
    console.print(
        f"vocabulary  {summary.vocab_size} characters over all splits"
        + (f" ({len(beyond)} not in train: {escape(show_chars(beyond))})" if beyond else "")
    )
    console.print(
        "tokens      "
        + ", ".join(f"{s} {n:,}" for s, n in summary.tokens.items())
        + f" (stored as {summary.ids_dtype.removeprefix('torch.')})"
    )
    console.print(f"fingerprint {summary.fingerprint}")
    state = (
        "unchanged"
        if summary.tokenizer_unchanged
        else f"replaced {summary.replaced_tokenizer[:12]}"
        if summary.replaced_tokenizer
        else "written"
    )
    console.print(f"tokenizer   {summary.tokenizer_path} [{state}]", markup=False)
    for split, path in summary.ids_paths.items():
        console.print(f"{split + '_ids':<11} {path}", markup=False)
    for notice in summary.notices:
        console.print(f"notice      {notice}", markup=False)
    console.print(
        f"done in {time.perf_counter() - started:.2f} s "
        f"(loading torch {loaded - started:.2f} s, preparing {summary.seconds:.2f} s)"
    )
    return 0
