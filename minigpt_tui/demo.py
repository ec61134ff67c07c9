"""The demo workspace: the embedded corpus, prepared and trained briefly with the `debug` preset,
in the user's cache folder. Runs in a worker thread; reports through a plain callback.

A build is complete only when its marker file exists, written last: a build cancelled or killed
half-way is rebuilt the next time (the half-trained run moves to previous/, as any fresh run's does)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from minigpt.io.workspace import Workspace

DEMO_STEPS = 200  # a few seconds on 2 CPU cores; enough for a curve and readable-ish samples
PREPARE_SHARE = 0.1  # of the progress bar
READY_MARKER = ".demo-ready"  # written after everything else


def demo_dir() -> Path:
    """The user's cache folder for this tool, as each OS names it (platformdirs: `$XDG_CACHE_HOME`
    or ~/.cache on Linux, ~/Library/Caches on macOS, %LOCALAPPDATA% on Windows)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("minigpt-tui", appauthor=False)) / "demo"


def is_ready(root: Path) -> bool:
    ws = Workspace(root)
    files = ws.tokenizer.is_file() and ws.best_checkpoint.is_file() and ws.ids("train").is_file()
    return files and (Path(root) / READY_MARKER).is_file()


def is_incomplete(root: Path) -> bool:
    """Something of a build is there but not its marker: it was cancelled or killed half-way."""
    return not is_ready(root) and Path(root).is_dir() and any(Path(root).iterdir())


def build_demo(
    root: Path, progress: Callable[[str, float], None], cancelled: Callable[[], bool], steps: int = DEMO_STEPS
) -> dict:
    """Prepare (unless the files are there) and train afresh; mark the workspace ready last.
    Returns {"seconds", "cancelled", ...}; a cancelled build leaves no marker."""
    from minigpt.data.prepare import prepare_workspace
    from minigpt.io.atomic import atomic_write_text
    from minigpt.threads import apply as apply_thread_policy
    from minigpt.train.config import TrainConfig
    from minigpt.train.trainer import Trainer

    # this thread's torch threads (OpenMP's count is per thread): on a busy 2-core machine the
    # build took 97-121 s with 2 threads and 5 s with 1
    apply_thread_policy("train")
    started = time.perf_counter()
    ws = Workspace(root)
    (Path(root) / READY_MARKER).unlink(missing_ok=True)
    if not (ws.tokenizer.is_file() and ws.ids("train").is_file() and ws.ids("val").is_file()):
        prepare_workspace(
            "demo", ws, force=True, progress=lambda stage, f: progress(f"preparing: {stage}", PREPARE_SHARE * f)
        )
    if cancelled():
        return {"seconds": time.perf_counter() - started, "cancelled": True}
    cfg = TrainConfig.from_preset("debug", max_steps=steps, device="cpu")
    trainer = Trainer(ws, cfg)

    def on_step(record: dict) -> None:
        if cancelled():
            trainer.request_stop()
        step = record["step"]
        progress(
            f"training step {step}/{steps}  loss {record['train_loss']:.3f}",
            PREPARE_SHARE + (1 - PREPARE_SHARE) * step / steps,
        )

    trainer.register_callback("on_step_end", on_step)
    summary = trainer.run()
    if cancelled() or summary.get("stopped_early"):
        return {"seconds": time.perf_counter() - started, "cancelled": True, **summary}
    atomic_write_text(f"{steps} steps\n", Path(root) / READY_MARKER)
    progress("done", 1.0)
    return {"seconds": time.perf_counter() - started, "cancelled": False, **summary}
