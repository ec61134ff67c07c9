"""Named points between two writes of a multi-file update, where tests make the process die.

`MINIGPT_KILL_AT=<name>` in the environment makes the process SIGKILL itself when it reaches
`crash_point("<name>")`: no handler, no `finally`, no flush runs, as with a power cut or the
kernel's OOM killer. The crash-consistency tests use it to check that every state a crash can
leave is one that `--resume`, `sample` and the UI read correctly. Unset (always, outside the
tests), a crash point is one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

KILL_AT = "MINIGPT_KILL_AT"


def crash_point(name: str) -> None:
    """Die here, at once, when `MINIGPT_KILL_AT` names this point."""
    if os.environ.get(KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
