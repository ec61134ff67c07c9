"""`minigpt prepare --source SRC`: build the tokenizer and the encoded splits of a workspace."""

from __future__ import annotations

import argparse


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


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..prepare import prepare_workspace  # imports torch: not for --help

    console = Console()
    with Progress(
        TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console, transient=True
    ) as bar:
        task = bar.add_task("preparing", total=1.0)
        summary = prepare_workspace(
            args.source,
            args.workspace,
            force=args.force,
            progress=lambda stage, fraction: bar.update(task, description=stage, completed=fraction),
        )

    files = ", ".join(summary.source_files) or "Python's pydoc topics"
    console.print(f"source      {summary.source_kind}: {escape(files)}")
    console.print(
        f"vocabulary  {summary.vocab_size} characters over all splits"
        + (
            f" ({len(summary.chars_beyond_train)} not in train: {escape(''.join(summary.chars_beyond_train[:20]))})"
            if summary.chars_beyond_train
            else ""
        )
    )
    console.print(
        "tokens      "
        + ", ".join(f"{s} {n:,}" for s, n in summary.tokens.items())
        + f" (stored as {summary.ids_dtype})"
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
    console.print(f"done in {summary.seconds:.2f} s")
    return 0
