"""What a pane, widget or screen may ask of the app it runs in: one typed boundary.

Panes never import `app.py` (it imports every pane); they reach the app through `host(self)`,
typed by this Protocol, which `MiniGPTApp` satisfies and a test harness can too (a workspace of
None: a pane shown without one says so). Nothing else of the app is a pane's business.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from textual.dom import DOMNode

    from minigpt.io.workspace import Workspace
    from minigpt_tui.session import Session


class Host(Protocol):
    workspace: Workspace | None  # the run folder the panes show
    session: Session | None  # the check options and context (None in a harness without checks)
    metrics_path: Path | None  # --metrics: the log the Loss pane follows (a metrics JSONL or TensorBoard events)
    device_name: str

    def run_checks(self, only: list[str] | None = None) -> None: ...


def host(node: DOMNode) -> Host:
    """The app `node` runs in, as the panes see it."""
    return cast("Host", node.app)


class NoWorkspace(RuntimeError):
    """A pane was asked for the run folder (or the checks' session) in an app that has none."""


def workspace_of(node: DOMNode) -> Workspace:
    """The run folder, for code that only runs with one (a pane without one says so first)."""
    ws = host(node).workspace
    if ws is None:
        raise NoWorkspace("this pane needs a workspace, and the app has none")
    return ws


def session_of(node: DOMNode) -> Session:
    """The checks' session, for code that only runs with one."""
    session = host(node).session
    if session is None:
        raise NoWorkspace("this pane needs the checks' session, and the app has none")
    return session
