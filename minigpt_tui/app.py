"""The App: bindings, commands, composing the panes, app-level handlers, the worker-error handler.

Torch is never imported on the event loop: the first screen paints while the check worker
imports it. The check catalog and the fault list are torch-free, so the palette and the fault
menu read them directly.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, cast

from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.events import Resize
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Input, TabbedContent
from textual.worker import Worker, WorkerState

from minigpt.data.tokenizer_load import HF_PREFIX, tokenizer_file_in, workspace_tokenizer
from minigpt.io.workspace import Workspace
from minigpt_tui import demo
from minigpt_tui.check_runs import CheckRunner, merged_report
from minigpt_tui.commands import MiniGPTCommands
from minigpt_tui.header import header_subtitle, judged_change
from minigpt_tui.idle_gc import IdleCollector
from minigpt_tui.messages import (
    CheckFinished,
    CheckProgressed,
    ChecksFinished,
    ChecksStarted,
    CheckStarted,
    FaultChanged,
    TrainingEnded,
)
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.screens.faults import CLEAR, FaultMenuScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.screens.quit import QuitTrainingScreen
from minigpt_tui.screens.setup import DemoOutcome, DemoSetupScreen
from minigpt_tui.session import Session
from minigpt_tui.widgets.blank import BlankContainer, BlankHeader
from minigpt_tui.widgets.key_footer import KeyFooter
from minigpt_tui.workbench import PANES, Workbench, WorkScreen, build_panes

JUDGED_POLL_S = 2.0  # how often the judged checkpoint is stat-ed (two stat calls: cheap)
_UNSEEN = object()  # the loop log's size before the first look
LOOP_RECHECK_S = 10.0  # a watched loop's log that grew is re-judged this often (the loop checks read logs only)
# the GIL hand-off interval while the app runs (Python: 5 ms): Textual's writer thread sends each frame,
# and waited that long for the GIL behind the UI thread's work after a pane switch (its restyles)
SWITCH_INTERVAL_S = 0.001


class MiniGPTApp(App):
    CSS_PATH = "app.tcss"
    # no automatic focus: "*" could land on an Input of a pane not yet hidden, and that Input
    # would swallow the pane keys; on_mount focuses the checks pane instead
    AUTO_FOCUS = None
    TITLE = "minigpt-tui"
    COMMANDS = App.COMMANDS | {MiniGPTCommands}
    BINDINGS = [
        *[
            Binding(str(n), f"show_pane('{pane_id}')", title, show=False)
            for n, (pane_id, title) in enumerate(PANES, start=1)
        ],
        # short labels: the footer holds these and the pane's keys at 80 columns
        Binding("r", "run_all", "Rerun"),
        Binding("f", "fault_menu", "Fault"),
        # ctrl+e, not a letter: a key that writes a file must not be one typed in words by accident
        Binding("ctrl+e", "export", "Export", show=False),  # in ? and ctrl+p: the footer has 80 columns
        Binding("t", "toggle_training", "Train"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+c", "quit", "Quit", show=False),
        Binding("escape", "leave_input", "Leave field", show=False),
    ]

    def __init__(
        self,
        workspace: str | Path = ".",
        *,
        checkpoint: str | None = None,
        tokenizer: str | None = None,
        model_spec: str | None = None,
        config_path: str | None = None,
        metrics: str | None = None,
        device: str = "auto",
        demo_mode: bool = False,
        fault: str | None = None,
        skip_overfit: bool = False,
        overfit_steps: int | None = None,
        lr_probe: bool = False,
        lr_probe_steps: int | None = None,
        run_learning_rate: float | None = None,
        demo_steps: int = demo.DEMO_STEPS,
        started_at: float | None = None,
    ) -> None:
        super().__init__()
        if "TEXTUAL_ANIMATIONS" not in os.environ:  # the user's own setting wins
            # no sliding tab underline: ~15 frames a pane switch, each a redraw of the tab bar,
            # are the CPU a switch costs a loaded machine (and bytes over SSH); the tab jumps
            self.animation_level = "none"
        self.started_at = time.perf_counter() if started_at is None else started_at
        self.timings: dict[str, float] = {}
        self.device_name = device
        self.fault_name = fault
        self.demo_mode, self.demo_steps = demo_mode, demo_steps
        self._option_args: dict[str, Any] = dict(
            checkpoint=checkpoint,
            tokenizer=tokenizer,
            model_spec=model_spec,
            config_path=config_path,
            metrics=metrics,
            device=device,
            fault=fault,
            skip_overfit=skip_overfit,
            lr_probe=lr_probe,
            run_learning_rate=run_learning_rate,
            **({"lr_probe_steps": lr_probe_steps} if lr_probe_steps else {}),
            **({"overfit_steps": overfit_steps} if overfit_steps else {}),
        )
        if demo_mode:
            workspace = demo.demo_dir()
        self.workspace = Workspace(workspace)
        # --metrics: the log the checks judge; the Loss pane follows it too when it is a JSONL file
        self.metrics_path = Path(metrics).expanduser() if metrics else None
        self.session = self._new_session()
        self.panes: dict = {}
        self.checks = CheckRunner(self, lambda: self.session)
        self._demo_cancel = threading.Event()
        self.checkpoint_label = "checking…"  # until the checks say which checkpoint they judged
        self._judged_change: str | None = None  # how the judged checkpoint changed on disk since
        self.resolved_device: str | None = None  # from the environment check
        self.idle_gc = IdleCollector()  # full garbage collections while no key comes (idle_gc.py)
        self._switch_interval = sys.getswitchinterval()  # restored at exit

    def _new_session(self) -> Session:
        def make_options():
            from minigpt.checks import CheckOptions

            return CheckOptions(workspace=self.workspace.root, **self._option_args)

        return Session(make_options)

    @property
    def needs_setup(self) -> bool:
        if self.demo_mode:
            return not demo.is_ready(self.workspace.root)
        # a watched loop's folder (`minigpt.watch`) has logs but no tokenizer: open it as it is; a
        # --tokenizer given, or a BPE workspace's tokenizer (tokenizer.json, *.tiktoken...), is one
        if self._option_args.get("tokenizer"):
            return False
        return not self._has_tokenizer and not self.workspace.loop_log.is_file()

    @property
    def _has_tokenizer(self) -> bool:
        """The workspace has a tokenizer of any kind, or `--model hf:FOLDER` has one beside its weights."""
        if workspace_tokenizer(self.workspace.tokenizer).is_file():
            return True
        spec = self._option_args.get("model_spec") or ""
        return spec.startswith(HF_PREFIX) and tokenizer_file_in(Path(spec[len(HF_PREFIX) :]).expanduser()) is not None

    # -- layout -----------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        return WorkScreen(id="_default")  # focus changes repaint what they change only (workbench.py)

    def compose(self) -> ComposeResult:
        yield BlankHeader()
        if not self.needs_setup:
            self.panes = build_panes(["checks"])  # the others after the first frame
            yield Workbench(self.panes)
        # in a bar of its own: Textual redraws every child of the screen on every frame (a tab's
        # underline sliding is ~15 frames a switch), a child of the bar only when the bar's row changes
        with BlankContainer(id="footer-bar"):
            yield KeyFooter(compact=True, show_command_palette=False)  # ctrl+p is in ? (help)

    def on_mount(self) -> None:
        self._update_title()
        self.idle_gc.start()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        self.set_interval(1.0, self.idle_gc.tick)
        self.call_after_refresh(self._first_paint)
        self.set_interval(JUDGED_POLL_S, self._check_judged_files)
        self._loop_log_size: int | None | object = _UNSEEN
        self.set_interval(LOOP_RECHECK_S, self._recheck_watched_loop)
        if not self.needs_setup:
            self.call_after_refresh(self._add_hidden_panes)  # before the checks: their messages go to every pane
            self.call_after_refresh(self._focus_pane, "checks")
            # torch work starts once the first frame is out: its import holds the GIL for seconds
            self.call_after_refresh(self.run_checks)
        elif self.demo_mode:
            self.call_after_refresh(self._start_demo)
        else:
            self.push_screen(
                ConfirmScreen(
                    f"There is no workspace at {self.workspace.root} (no tokenizer file).\n\n"
                    f"Build the demo workspace from the embedded corpus in {demo.demo_dir()}, "
                    f"train it for {self.demo_steps} steps and open it?",
                    yes="Build the demo",
                    no="Open as it is",
                ),
                self._answer_demo,
            )

    def _add_hidden_panes(self) -> None:
        hidden = build_panes(pane_id for pane_id, _ in PANES if pane_id not in self.panes)
        self.panes.update(hidden)
        self.query_one(Workbench).add_panes(hidden)

    def _first_paint(self) -> None:
        self.timings["first_paint_s"] = time.perf_counter() - self.started_at
        self.log.info(f"first paint after {self.timings['first_paint_s']:.2f}s")

    def _update_title(self, width: int | None = None) -> None:
        device = (
            self.device_name
            if self.resolved_device in (None, self.device_name)
            else f"{self.resolved_device} ({self.device_name})"
        )
        self.sub_title = header_subtitle(
            width or self.size.width or 80,
            self.title,
            self.fault_name,
            self.checkpoint_label,
            device,
            str(self.workspace.root),
        )

    @on(Resize)
    def _refit_title(self, event: Resize) -> None:
        self._update_title(event.size.width)

    async def _open_workbench(self) -> None:
        if not self.panes:
            self.panes = build_panes()
            await self.mount(Workbench(self.panes), after=self.query_one(Header))
            self.call_after_refresh(self._focus_pane, "checks")
        self.run_checks()

    # -- demo workspace ---------------------------------------------------------------------
    async def _answer_demo(self, yes: bool | None) -> None:
        if yes:
            self.workspace = Workspace(demo.demo_dir())
            self.session = self._new_session()
            self._update_title()
            if demo.is_ready(self.workspace.root):
                await self._open_workbench()
            else:
                self._start_demo()
        else:
            await self._open_workbench()  # the files check says what is missing

    def _start_demo(self) -> None:
        if demo.is_incomplete(self.workspace.root):
            self.notify(
                "the demo workspace was left incomplete (a build cancelled or killed half-way): rebuilding it",
                severity="warning",
                timeout=8,
            )
        self.push_screen(
            DemoSetupScreen(self.workspace.root, self._demo_cancel, steps=self.demo_steps), self._demo_done
        )

    async def _demo_done(self, outcome: DemoOutcome) -> None:
        if outcome is None:  # cancelled: quit, nothing marked ready
            self.exit()
        elif isinstance(outcome, BaseException):
            self._demo_failed(outcome)
        else:
            self.timings["demo_s"] = outcome
            self.session = self._new_session()
            self.notify(f"demo workspace ready in {outcome:.0f}s", markup=False)
            await self._open_workbench()

    # -- checks -----------------------------------------------------------------------------
    def run_checks(self, only: list[str] | None = None) -> None:
        """Cancel a run in progress and start a new one (all checks, or `only` and their dependencies)."""
        self.checks.start(only)

    def _forward(self, message: Message) -> None:
        """Give every pane its own copy; copies do not bubble back up to the app."""
        for pane in self.panes.values():
            copy: Any = dataclasses.replace(cast(Any, message))  # the engine's messages are dataclasses
            copy.bubble = False
            pane.post_message(copy)

    @on(ChecksStarted)
    @on(CheckStarted)
    @on(CheckProgressed)
    def forward_progress(self, message: Message) -> None:
        self._forward(message)

    @on(TrainingEnded)
    def recheck_after_training(self, message: TrainingEnded) -> None:
        # the run wrote new checkpoints (and moved the old ones aside): the header, the checks
        # and every pane must describe the new ones
        self.checkpoint_label = "checking…"
        self._update_title()
        self.notify(f"training ended (exit {message.returncode}); re-running the checks", markup=False)
        self.run_checks()

    @on(CheckFinished)
    def forward_result(self, message: CheckFinished) -> None:
        values = message.result.values
        if message.result.id == "checkpoint_load":
            status = message.result.status.value
            self.checkpoint_label = (
                f"ckpt step {values['step']}"
                if "step" in values
                else self._watched_label() or "no checkpoint"
                if status == "skip"
                else "ckpt unreadable"
            )
            self._update_title()
        elif message.result.id == "environment" and "device" in values:
            self.resolved_device = values["device"]
            self._update_title()
        self._forward(message)

    @on(ChecksFinished)
    def merge_report(self, message: ChecksFinished) -> None:
        report = merged_report(self.session.last_report, message.report)
        if report is message.report:
            self.timings["all_checks_s"] = time.perf_counter() - self.checks.started_at
            self.timings.setdefault("first_checks_done_s", time.perf_counter() - self.started_at)
            self.log.info(f"all checks done in {self.timings['all_checks_s']:.2f}s")
        self.session.last_report = report
        self.idle_gc.freeze_loaded()  # torch and the model are in: freeze what lives on
        self._show_judged(report)
        self._forward(ChecksFinished(report))  # the gradients pane renders the gradients check's table

    def _show_judged(self, report) -> None:
        """The header names the checkpoint the verdicts are about: its step and when it was saved."""
        ckpt = report.judged_file("checkpoint")
        if ckpt is None or ckpt.step is None:
            return  # checkpoint_load's words ("no checkpoint", "ckpt unreadable") stand
        when = ""
        if ckpt.mtime is not None:
            same_day = time.strftime("%Y%m%d", time.localtime(ckpt.mtime)) == time.strftime("%Y%m%d")
            when = time.strftime(" %H:%M" if same_day else " %m-%d %H:%M", time.localtime(ckpt.mtime))
        self.checkpoint_label = f"ckpt step {ckpt.step}{when}"
        self._judged_change = None
        self._update_title()

    def _watched_label(self) -> str | None:
        """The header's words for a folder that `minigpt.watch` records: the loop's PID while the
        loop holds the folder's lock (a loop started with `lock=False` names none)."""
        if not self.workspace.loop_log.is_file():
            return None
        from minigpt.io.lock import holder  # pure Python: one small read

        held = holder(self.workspace.root)
        return f"watched loop PID {held.pid}" if held is not None and held.command == "watch" else "watched loop"

    def _check_judged_files(self) -> None:
        """The header and the checks' status must not describe a checkpoint that is gone: say
        what changed and that `r` re-runs the checks (not automatically: a run writing a
        checkpoint every few steps would keep the checks running). A watched loop's PID in the
        header follows the loop (started, ended)."""
        report = self.session.last_report
        if report is None or self.checks.running:
            return
        if self.checkpoint_label.startswith("watched loop"):
            label = self._watched_label() or self.checkpoint_label
            if label != self.checkpoint_label:
                self.checkpoint_label = label
                self._update_title()
        judged = report.judged_file("checkpoint")
        change = judged_change(judged)
        if change == self._judged_change:
            return
        self._judged_change = change
        if change is None or judged is None:
            return
        self.checkpoint_label = f"ckpt step {judged.step} {change} · r re-checks"
        self._update_title()
        checks = self.panes.get("checks")
        if checks is not None:
            checks.mark_stale(f"the checkpoint these results judged was {change} since")

    def _recheck_watched_loop(self) -> None:
        """A loop that `minigpt.watch` records is re-judged as it goes: the loop checks and the curve,
        when its log grew since the last look."""
        report = self.session.last_report
        if not self.panes or report is None or self.checks.running:
            return
        try:
            size: int | None = self.workspace.loop_log.stat().st_size
        except OSError:
            size = None  # no loop yet (the UI may open before the loop starts) or none at all
        if self._loop_log_size is _UNSEEN:
            self._loop_log_size = size  # the first look: the checks just read it
            return
        if size == self._loop_log_size:
            return
        self._loop_log_size = size
        if size is None:
            return
        files = report.by_id().get("files")
        if files is not None and files.status.value == "fail":
            # the folder the checks failed as empty now holds a loop's log: judge all of it again
            self.run_checks()
            return
        from minigpt.checks import catalog

        self.run_checks(only=[cid for cid, info in catalog().items() if info.stage == "loop"] + ["training_curve"])

    # -- actions ----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # a digit, letter or ? typed into a text field belongs to the field
        focused = self.focused
        if (
            action in ("show_pane", "run_all", "fault_menu", "export", "toggle_training", "help", "quit")
            and isinstance(focused, Input)
            and focused.region.area > 0
        ):
            return False
        return True

    def action_show_pane(self, pane_id: str) -> None:
        if not self.panes:
            return
        self.query_one(TabbedContent).active = pane_id
        self.call_after_refresh(self._focus_pane, pane_id)

    def _focus_pane(self, pane_id: str) -> None:
        # focusing a widget in another pane makes TabbedContent switch to it: a late call
        # (from on_mount, under load) must not undo a pane key pressed in the meantime
        if self.query_one(TabbedContent).active != pane_id:
            return
        pane = self.panes.get(pane_id)  # None: a key pressed before the hidden panes were built
        focusable = None
        if pane is not None:
            focusable = pane if pane.can_focus else next((w for w in pane.query("*") if w.focusable), None)
        if focusable is not None and not isinstance(focusable, Input):
            focusable.focus()
        else:
            self.query_one(TabbedContent).query_one("Tabs").focus()

    def action_leave_input(self) -> None:
        """escape: out of a text field to the tab bar (where digits and letters are keys again);
        on a pane with a text field and the focus elsewhere, into its first field."""
        if not self.panes:
            return
        if isinstance(self.focused, Input):
            self.query_one(TabbedContent).query_one("Tabs").focus()
            return
        pane = self.panes.get(self.query_one(TabbedContent).active)
        field = None if pane is None else next((w for w in pane.query(Input) if w.focusable), None)
        if field is not None:
            field.focus()

    def action_run_all(self) -> None:
        self.run_checks()

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(PANES))

    def action_fault_menu(self) -> None:
        from minigpt.checks import FAULTS  # torch-free

        items = [(f.name, f.description, f.intended) for f in FAULTS.values()]
        self.push_screen(FaultMenuScreen(items, self.fault_name), self.inject_fault)

    def inject_fault(self, choice: str | None) -> None:
        if choice is None:
            return
        fault = None if choice == CLEAR else choice
        self.fault_name = fault
        self.session.set_fault(fault)
        self._update_title()
        self.notify(
            f"fault injected: {fault}; re-running the checks" if fault else "fault cleared; re-running the checks",
            markup=False,
        )
        self._forward(FaultChanged(fault))
        self.run_checks()

    def action_export(self) -> None:
        report = self.session.last_report
        if report is None:
            self.notify("no report yet: the checks are still running", severity="warning")
            return
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self._export(report, self.workspace.root / "reports" / f"check-{stamp}.json")

    @work(thread=True, exclusive=True, exit_on_error=False, group="export", name="export report")
    def _export(self, report, path: Path) -> None:
        from minigpt.checks.report import write_report

        path.parent.mkdir(parents=True, exist_ok=True)
        write_report(report, path)
        self.call_from_thread(self.notify, f"report written to {path}", markup=False)

    def action_toggle_training(self) -> None:
        pane = self.panes.get("loss")
        if pane is None:
            return
        if pane.controls.training:
            pane.controls.stop_training()
        else:
            pane.action_start_training()  # asks before moving an existing run aside

    def palette_commands(self) -> list[tuple[str, str, Callable[[], object]]]:
        """(title, help, callback) for the command palette (torch-free)."""
        from minigpt.checks import FAULTS, catalog

        commands: list[tuple[str, str, Callable[[], object]]] = [
            ("Run all checks", "re-run the whole pipeline (r)", self.action_run_all),
            ("Start/stop training", "train in the Loss pane (t)", self.action_toggle_training),
            ("Export the report", "write <workspace>/reports/check-<time>.json (ctrl+e)", self.action_export),
            ("Clear fault", "run the pipeline without an injected bug", partial(self.inject_fault, CLEAR)),
            ("Help", "key bindings (?)", self.action_help),
        ]
        commands += [
            (f"Show pane {n}: {title}", f"switch to the {title} pane ({n})", partial(self.action_show_pane, pane_id))
            for n, (pane_id, title) in enumerate(PANES, start=1)
        ]
        commands += [
            (f"Run check: {cid}", info.title, partial(self.run_checks, [cid])) for cid, info in catalog().items()
        ]
        commands += [
            (f"Inject fault: {f.name}", f"{f.description} (trips {f.intended})", partial(self.inject_fault, f.name))
            for f in FAULTS.values()
        ]
        return commands

    # -- errors and shutdown ----------------------------------------------------------------
    @on(Worker.StateChanged)
    def report_worker_error(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        text = f"{event.worker.name or event.worker.group} failed: {type(error).__name__}: {error}"
        self.log.error(text)
        if event.worker.group == "tokenizer" and not self._has_tokenizer and not self._option_args.get("tokenizer"):
            return  # a folder without a tokenizer (a watched loop's): the Tokenizer pane says so in place
        self.notify(text, title="error", severity="error", timeout=10, markup=False)
        if event.worker.group == "checks" and "checks" in self.panes:
            self.panes["checks"].query_one("#checks-status").update(f"check run failed: {type(error).__name__}")

    def _demo_failed(self, error: BaseException) -> None:
        """The demo could not be built (an unusable cache folder, a full disk): say where and why in a
        dialog that stays until answered, never a toast over a blank "checking…" screen."""
        message = getattr(error, "message", None)
        if message is None and isinstance(error, OSError):
            from minigpt.io.files import os_error

            message = os_error(error, error.filename).message  # classified by errno, with its path
        message = message or f"{type(error).__name__}: {error}"
        self.checkpoint_label = "demo not built"
        self._update_title()
        self.push_screen(
            ConfirmScreen(
                f"Could not build the demo workspace in {self.workspace.root}:\n\n{message}\n\n"
                "Point XDG_CACHE_HOME at a writable folder, or open a workspace of your own with "
                "minigpt-tui --workspace DIR.",
                yes="Quit",
                no="Stay",
            ),
            lambda quit_now: self.exit() if quit_now else None,
        )

    def stop_threads(self) -> None:
        """Tell every thread to stop at its next check: a thread that ignores cancel keeps the process alive."""
        self.checks.cancel()
        self._demo_cancel.set()

    async def action_quit(self) -> None:
        """Quit; with the UI's training run going, ask first: stop it, leave it running, or stay."""
        loss = self.panes.get("loss")
        if loss is not None and loss.controls.training:
            if not isinstance(self.screen, QuitTrainingScreen):
                run = loss.controls.run
                self.push_screen(QuitTrainingScreen(run.pid, str(run.log_path)), self._answer_quit)
            return
        self.stop_threads()
        self.exit()

    async def _answer_quit(self, choice: str | None) -> None:
        loss = self.panes.get("loss")
        run = loss.controls.run if loss is not None else None
        if choice == "cancel" or run is None:
            return
        if choice == "leave":
            run.detach()
            self.notify(f"training left running (PID {run.pid})", markup=False)
        else:
            self.notify(f"stopping training (PID {run.pid})…", markup=False)
            await run.stop_and_wait()
        self.stop_threads()
        self.exit()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)):
            self.idle_gc.input_seen()
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.idle_gc.stop()
        sys.setswitchinterval(self._switch_interval)
        self.stop_threads()
