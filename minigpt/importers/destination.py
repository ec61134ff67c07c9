"""Where an import may write: a new or empty workspace, or the folder a watched loop of the same
run wrote its logs to.

nanoGPT's train.py watched with `minigpt.watch(model, optimizer, workspace=out_dir)` leaves
`out_dir/logs/` (loop.jsonl, metrics.jsonl, grads.jsonl) beside `ckpt.pt`. Importing that run into
the same folder adds the checkpoint, the tokenizer and the data beside the loop's logs and never
touches them, so `minigpt check` judges the loop and the model in one report. Anything else a run
leaves (a tokenizer, IDs, checkpoints, a metrics log without a watched loop) is refused: the import
would replace it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from minigpt.data.tokenizer_load import workspace_tokenizer
from minigpt.errors import DataError
from minigpt.io.files import open_regular, os_error
from minigpt.io.workspace import SPLITS, Workspace

MAX_HEADER_BYTES = 1 << 20  # the loop log's first line: who wrote it (a few kB)


def watched_loop_header(ws: Workspace, *, log: str | os.PathLike | None) -> dict | None:
    """The header of the workspace's watched loop (`logs/loop.jsonl`), or None when it has none.
    Raises DataError when the workspace holds a run the import would replace, or when `log` (a
    nanoGPT stdout to write as logs/metrics.jsonl) would replace the watched loop's own metrics."""
    header = _loop_header(ws.loop_log)
    run_files = [workspace_tokenizer(ws.tokenizer), *(ws.ids(s) for s in SPLITS)]
    run_files += [ws.best_checkpoint, ws.latest_checkpoint] + ([ws.metrics] if header is None else [])
    present = [p for p in run_files if os.path.lexists(p)]
    if present:
        raise DataError(
            f"Refusing to import into {ws.root}: it already holds a run "
            f"({', '.join(str(p.relative_to(ws.root)) for p in present[:4])})",
            path=ws.root,
            causes=[
                "import into a new or empty --workspace: its tokenizer and checkpoints would be replaced",
                "a folder that only a watched loop wrote to (logs/loop.jsonl) takes the import beside its logs",
            ],
        )
    if header is not None and log is not None and os.path.lexists(ws.metrics):
        raise DataError(
            f"Refusing --log {os.fspath(log)}: {ws.root} holds a watched loop, whose logs/metrics.jsonl the watch "
            "wrote and the import keeps",
            path=ws.metrics,
            causes=["leave out --log: the watch's metrics log has the run's losses, step by step"],
        )
    return header


def require_same_run(header: dict, parameters: int, ws: Workspace, checkpoint: Path) -> str:
    """Refuse a checkpoint of another model than the watched loop's (the parameter counts differ);
    return the notice that says the loop's logs were kept."""
    watched = header.get("parameters")
    if isinstance(watched, int) and not isinstance(watched, bool) and watched != parameters:
        raise DataError(
            f"{checkpoint} is not the model of the loop watched into {ws.root}: it has {parameters:,} "
            f"parameters, the watched loop's model {watched:,} ({ws.loop_log})",
            path=checkpoint,
            causes=["--out-dir is another run's", "import into a new --workspace instead"],
        )
    return (
        f"kept the watched loop's logs in {ws.loop_log.parent} (its model: {header.get('model_class', '?')}, "
        f"{parameters:,} parameters): `minigpt check` judges the loop and the model together"
    )


def _loop_header(path: Path) -> dict | None:
    """The first line of a watched loop's log, or None when there is no such file."""
    if not os.path.lexists(path):
        return None
    try:
        fd = open_regular(path, os.O_RDONLY, what="the loop log", action="read")
        with os.fdopen(fd, "rb") as fh:
            first = fh.readline(MAX_HEADER_BYTES)
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    try:
        header = json.loads(first)
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("kind") != "header":
        raise DataError(
            f"{path} is not a watched loop's log: its first line is no header (kind 'header')",
            path=path,
            causes=["another program wrote it", "the watch was killed before it wrote its first line"],
        )
    return header
