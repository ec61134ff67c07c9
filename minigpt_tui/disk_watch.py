"""What the app follows on disk between check runs, for its header and its re-checks: the
checkpoint the last report judged (the header's label for it, and whether a CLI run moved or
replaced it since), a watched loop's lock holder (its PID in the header while the loop runs), and
a watched loop's log growing (its checks run again). A few stat calls and one small read: cheap
enough for the app's timers on the UI thread."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt_tui.header import judged_change

if TYPE_CHECKING:
    from minigpt.checks.result import CheckResult, Report
    from minigpt.io.workspace import Workspace

JUDGED_POLL_S = 2.0  # how often the judged checkpoint is stat-ed (two stat calls: cheap)
LOOP_RECHECK_S = 10.0  # a watched loop's log that grew is re-judged this often (the loop checks read logs only)
_UNSEEN = object()  # the loop log's size before the first look


def watched_label(workspace: Workspace) -> str | None:
    """The header's words for a folder that `minigpt.watch` records: the loop's PID while the
    loop holds the folder's lock (a loop started with `lock=False` names none)."""
    if not workspace.loop_log.is_file():
        return None
    from minigpt.io.lock import holder  # pure Python: one small read

    held = holder(workspace.root)
    return f"watched loop PID {held.pid}" if held is not None and held.command == "watch" else "watched loop"


class JudgedCheckpoint:
    """The header's words for the checkpoint the verdicts are about ("ckpt step 600 09:14"), kept
    true as the checks report and as the file on disk changes."""

    def __init__(self) -> None:
        self.label = "checking…"  # until the checks say which checkpoint they judged
        self._change: str | None = None  # how the judged checkpoint changed on disk since

    def loaded(self, result: CheckResult, workspace: Workspace) -> None:
        """checkpoint_load's result: the step it loaded, a watched loop's folder, or why there is none."""
        values = result.values
        self.label = (
            f"ckpt step {values['step']}"
            if "step" in values
            else watched_label(workspace) or "no checkpoint"
            if result.status.value == "skip"
            else "ckpt unreadable"
        )

    def judged(self, report: Report) -> bool:
        """The checkpoint the report judged, with its step and when it was saved; False (the label
        unchanged) when it names none: checkpoint_load's words ("no checkpoint", "ckpt unreadable") stand."""
        ckpt = report.judged_file("checkpoint")
        if ckpt is None or ckpt.step is None:
            return False
        when = ""
        if ckpt.mtime is not None:
            same_day = time.strftime("%Y%m%d", time.localtime(ckpt.mtime)) == time.strftime("%Y%m%d")
            when = time.strftime(" %H:%M" if same_day else " %m-%d %H:%M", time.localtime(ckpt.mtime))
        self.label = f"ckpt step {ckpt.step}{when}"
        self._change = None
        return True

    def follow(self, report: Report, workspace: Workspace) -> str | None:
        """Look at the disk again: a watched loop's PID follows the loop (started, ended), and a
        judged checkpoint that a CLI run moved or replaced is labelled so, with `r` to re-check (not
        automatically: a run writing a checkpoint every few steps would keep the checks running).
        Returns why the report no longer describes the disk, once per change; None when nothing new
        changed."""
        if self.label.startswith("watched loop"):
            self.label = watched_label(workspace) or self.label
        if self.label == "no checkpoint" and workspace.best_checkpoint.is_file():
            # a run in another terminal wrote the workspace's first checkpoint since the checks ran
            self.label = "ckpt written since · r re-checks"
            return "a checkpoint was written since (these results judged none)"
        judged = report.judged_file("checkpoint")
        change = judged_change(judged)
        if change == self._change:
            return None
        self._change = change
        if change is None or judged is None:
            return None
        self.label = f"ckpt step {judged.step} {change} · r re-checks"
        return f"the checkpoint these results judged was {change} since"


class LoopLogWatch:
    """A watched loop's log (`minigpt.watch` writes it): has it grown since the last look?"""

    def __init__(self) -> None:
        self._size: int | None | object = _UNSEEN

    def grew(self, log: Path) -> bool:
        try:
            size: int | None = log.stat().st_size
        except OSError:
            size = None  # no loop yet (the UI may open before the loop starts) or none at all
        if self._size is _UNSEEN:
            self._size = size  # the first look: the checks just read it
            return False
        if size == self._size:
            return False
        self._size = size
        return size is not None


def loop_recheck(report: Report) -> list[str] | None:
    """The checks a grown loop log calls for: the loop checks and the curve; all of them (None)
    when the files check failed, as the folder the checks failed as empty now holds a loop's log."""
    files = report.by_id().get("files")
    if files is not None and files.status.value == "fail":
        return None
    from minigpt.checks import catalog

    return [cid for cid, info in catalog().items() if info.stage == "loop"] + ["training_curve"]
