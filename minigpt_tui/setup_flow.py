"""The first run on a folder that is no workspace yet: whether it needs a setup, the offer to build
the demo workspace, the build on its own screen, and what follows: the workbench opened on the
demo, the app quit (the build cancelled), or a dialog that says where and why the demo could not be
built and stays until answered. The app hands itself in; what the flow changes of it is `SetupHost`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from textual.app import App

from minigpt.data.tokenizer_load import HF_PREFIX, tokenizer_file_in, workspace_tokenizer
from minigpt_tui import demo
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.screens.setup import DemoOutcome, DemoSetupScreen

if TYPE_CHECKING:
    from minigpt.io.workspace import Workspace


class SetupHost(Protocol):
    workspace: Workspace
    demo_steps: int  # how long the demo trains
    timings: dict[str, float]  # the build's seconds go in as "demo_s"

    def use_workspace(self, root: Path) -> None: ...  # the workspace, a fresh session, the header

    def renew_session(self) -> None: ...  # the files a build wrote are read afresh

    def show_checkpoint_label(self, label: str) -> None: ...  # the header's checkpoint words

    async def open_workbench(self) -> None: ...  # the panes (once) and a check run


def has_tokenizer(workspace: Workspace, model_spec: str | None) -> bool:
    """The workspace has a tokenizer of any kind, or `--model hf:FOLDER` has one beside its weights."""
    if workspace_tokenizer(workspace.tokenizer).is_file():
        return True
    spec = model_spec or ""
    return spec.startswith(HF_PREFIX) and tokenizer_file_in(Path(spec[len(HF_PREFIX) :]).expanduser()) is not None


def needs_setup(workspace: Workspace, demo_mode: bool, tokenizer: str | None, model_spec: str | None) -> bool:
    """--demo: until the demo is built. Otherwise a folder with no tokenizer and no watched loop's log."""
    if demo_mode:
        return not demo.is_ready(workspace.root)
    # a watched loop's folder (`minigpt.watch`) has logs but no tokenizer: open it as it is; a
    # --tokenizer given, or a BPE workspace's tokenizer (tokenizer.json, *.tiktoken...), is one
    if tokenizer:
        return False
    return not has_tokenizer(workspace, model_spec) and not workspace.loop_log.is_file()


class DemoSetup:
    """Offer the demo, build it on the setup screen, then open it."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.host = cast("SetupHost", app)  # the app's own part of the flow, typed
        self.cancel = threading.Event()  # set at quit: a build stops at its next step

    def offer(self) -> None:
        """No workspace here: build the demo and open it (or open it, when it is built already), or
        open the folder as it is. The header says what is on screen: nothing is checked yet."""
        self.host.show_checkpoint_label("no workspace")
        where = demo.demo_dir()
        if demo.is_ready(where):
            question, yes = f"Open the demo workspace, already built in {where}?", "Open the demo"
        else:
            question = (
                f"Build the demo workspace from the embedded corpus in {where}, "
                f"train it for {self.host.demo_steps} steps and open it?"
            )
            yes = "Build the demo"
        self.app.push_screen(
            ConfirmScreen(
                f"There is no workspace at {self.host.workspace.root} (no tokenizer file).\n\n{question}",
                yes=yes,
                no="Open as it is",
            ),
            self._answered,
        )

    async def _answered(self, yes: bool | None) -> None:
        self.host.show_checkpoint_label("checking…")  # the workbench opens and its checks start
        if yes:
            self.host.use_workspace(demo.demo_dir())
            if demo.is_ready(self.host.workspace.root):
                await self.host.open_workbench()
            else:
                self.build()
        else:
            await self.host.open_workbench()  # the files check says what is missing

    def build(self) -> None:
        """Build the demo in the app's workspace (a build left half-way is rebuilt, and says so)."""
        root = self.host.workspace.root
        self.host.show_checkpoint_label("building the demo…")
        if demo.is_incomplete(root):
            self.app.notify(
                "the demo workspace was left incomplete (a build cancelled or killed half-way): rebuilding it",
                severity="warning",
                timeout=8,
            )
        self.app.push_screen(DemoSetupScreen(root, self.cancel, steps=self.host.demo_steps), self._built)

    async def _built(self, outcome: DemoOutcome) -> None:
        if outcome is None:  # cancelled: quit, nothing marked ready
            self.app.exit()
        elif isinstance(outcome, BaseException):
            self._failed(outcome)
        else:
            self.host.timings["demo_s"] = outcome
            self.host.renew_session()
            self.app.notify(f"demo workspace ready in {outcome:.0f}s", markup=False)
            await self.host.open_workbench()

    def _failed(self, error: BaseException) -> None:
        """The demo could not be built (an unusable cache folder, a full disk): say where and why in a
        dialog that stays until answered, never a toast over a blank "checking…" screen."""
        message = getattr(error, "message", None)
        if message is None and isinstance(error, OSError):
            from minigpt.io.files import os_error

            message = os_error(error, error.filename).message  # classified by errno, with its path
        message = message or f"{type(error).__name__}: {error}"
        self.host.show_checkpoint_label("demo not built")
        self.app.push_screen(
            ConfirmScreen(
                f"Could not build the demo workspace in {self.host.workspace.root}:\n\n{message}\n\n"
                "Point XDG_CACHE_HOME at a writable folder, or open a workspace of your own with "
                "minigpt-tui --workspace DIR.",
                yes="Quit",
                no="Stay",
            ),
            lambda quit_now: self.app.exit() if quit_now else None,
        )
