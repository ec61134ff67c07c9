"""The App: bindings, commands, composing the panes, app-level handlers, the worker-error handler.
Beside it: what the header and the re-checks follow on disk (disk_watch.py), the first run on a
folder (setup_flow.py), where the focus goes (focus.py), quitting with a training run (quit_flow.py).

Torch is never imported on the event loop: the first screen paints while the check worker
imports it. The check catalog and the fault list are torch-free, so the palette and the fault
menu read them directly.
"""

from __future__ import annotations

import dataclasses
import os
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
from textual.widgets import Header, TabbedContent
from textual.worker import Worker, WorkerState

from minigpt.io.workspace import Workspace
from minigpt_tui import demo, disk_watch, focus, quit_flow
from minigpt_tui.check_runs import CheckRunner, merged_report
from minigpt_tui.commands import MiniGPTCommands, SteadyCommandPalette
from minigpt_tui.header import header_subtitle
from minigpt_tui.idle_gc import IdleCollector
from minigpt_tui.messages import (
    CheckFinished,
    CheckProgressed,
    ChecksFinished,
    ChecksStarted,
    CheckStarted,
    FaultChanged,
    TrainingEnded,
    TrainingRequested,
    TrainingStarted,
    TrainingStopRequested,
)
from minigpt_tui.runtime import ProcessSettings
from minigpt_tui.screens.faults import CLEAR, FaultMenuScreen
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.session import Session
from minigpt_tui.setup_flow import DemoSetup, has_tokenizer, needs_setup
from minigpt_tui.training_session import TrainingSession
from minigpt_tui.widgets.blank import BlankContainer, BlankHeader
from minigpt_tui.widgets.key_footer import KeyFooter
from minigpt_tui.workbench import PANES, Panes, Workbench, build_panes


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
        # escape: out of a text field (shown in the footer while typing, when every key above is
        # held back), or from elsewhere into the shown pane's field; check_action enables one
        Binding("escape", "leave_field", "Leave field"),
        Binding("escape", "enter_field", "Into field", show=False),
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
        self.panes = Panes()  # built after the first frame, or after the setup
        self.training = TrainingSession(self)  # the run started from the UI: the panes show it
        self.checks = CheckRunner(self, lambda: self.session)
        self.setup = DemoSetup(self)  # the demo offered, built and opened (setup_flow.py)
        self.judged = disk_watch.JudgedCheckpoint()  # the header's words for the judged checkpoint
        self.loop_log = disk_watch.LoopLogWatch()  # a watched loop's log, re-judged as it grows
        self.resolved_device: str | None = None  # from the environment check
        self.idle_gc = IdleCollector()  # full garbage collections while no key comes (idle_gc.py)
        self.process = ProcessSettings()  # the GIL's switch interval and the worker pool (runtime.py)

    def _new_session(self) -> Session:
        def make_options():
            from minigpt.checks import CheckOptions

            return CheckOptions(workspace=self.workspace.root, **self._option_args)

        return Session(make_options)

    def renew_session(self) -> None:
        """The checks' options and context built afresh (the demo's build wrote the files they read)."""
        self.session = self._new_session()

    def use_workspace(self, root: Path) -> None:
        self.workspace = Workspace(root)
        self.session = self._new_session()
        self._update_title()

    @property
    def needs_setup(self) -> bool:
        opts = self._option_args
        return needs_setup(self.workspace, self.demo_mode, opts.get("tokenizer"), opts.get("model_spec"))

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield BlankHeader()
        if not self.needs_setup:
            first = build_panes(["checks"])  # the others after the first frame
            self.panes.add(first)
            yield Workbench(first)
        # in a bar of its own: Textual redraws every child of the screen on every frame (a tab's
        # underline sliding is ~15 frames a switch), a child of the bar only when the bar's row changes
        with BlankContainer(id="footer-bar"):
            yield KeyFooter(compact=True, show_command_palette=False)  # ctrl+p is in ? (help)

    def on_load(self) -> None:
        self.process.use_worker_pool()  # before any worker starts

    def on_mount(self) -> None:
        self._update_title()
        self.idle_gc.start()
        self.process.apply()
        self.set_interval(1.0, self.idle_gc.tick)
        self.call_after_refresh(self._first_paint)
        self.set_interval(disk_watch.JUDGED_POLL_S, self._follow_judged_files)
        self.set_interval(disk_watch.LOOP_RECHECK_S, self._recheck_watched_loop)
        if not self.needs_setup:
            self.call_after_refresh(self._add_hidden_panes)  # before the checks: their messages go to every pane
            self.call_after_refresh(self._focus_pane, "checks")
            # torch work starts once the first frame is out: its import holds the GIL for seconds
            self.call_after_refresh(self.run_checks)
        elif self.demo_mode:
            self.call_after_refresh(self.setup.build)
        else:
            self.setup.offer()

    def _add_hidden_panes(self) -> None:
        hidden = build_panes(pane_id for pane_id, _ in PANES if pane_id not in self.panes)
        self.panes.add(hidden)
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
            self.judged.label,
            device,
            str(self.workspace.root),
        )

    @on(Resize)
    def _refit_title(self, event: Resize) -> None:
        self._update_title(event.size.width)

    def show_checkpoint_label(self, label: str) -> None:
        self.judged.label = label
        self._update_title()

    async def open_workbench(self) -> None:
        if not self.panes:
            panes = build_panes()
            self.panes.add(panes)
            await self.mount(Workbench(panes), after=self.query_one(Header))
            self.call_after_refresh(self._focus_pane, "checks")
        self.run_checks()

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

    # -- the training run (training_session.py): panes ask for it, and are told what it does ---
    @on(TrainingRequested)
    def start_training(self, message: TrainingRequested) -> None:
        if not self.training.start(self.workspace.root, message.args):
            self.notify("training is already running (x stops it)", severity="warning")

    @on(TrainingStopRequested)
    def stop_training(self) -> None:
        self.training.stop()

    @on(TrainingStarted)
    def forward_training_started(self, message: TrainingStarted) -> None:
        self._forward(message)

    @on(TrainingEnded)
    def recheck_after_training(self, message: TrainingEnded) -> None:
        # the run wrote new checkpoints (and moved the old ones aside): the header, the checks
        # and every pane must describe the new ones
        self._forward(message)
        self.session.reload()  # the next check or sample loads the new checkpoint
        self.show_checkpoint_label("checking…")
        self.notify(f"training ended (exit {message.returncode}); re-running the checks", markup=False)
        self.run_checks()

    @on(CheckFinished)
    def forward_result(self, message: CheckFinished) -> None:
        values = message.result.values
        if message.result.id == "checkpoint_load":
            self.judged.loaded(message.result, self.workspace)
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
        if self.judged.judged(report):  # the header names the checkpoint the verdicts are about
            self._update_title()
        self._forward(ChecksFinished(report))  # the gradients pane renders the gradients check's table

    def _follow_judged_files(self) -> None:
        """The header and the checks' status must not describe a checkpoint that is gone; a watched
        loop's PID in the header follows the loop (disk_watch.py)."""
        report = self.session.last_report
        if report is None or self.checks.running:
            return
        label = self.judged.label
        stale = self.judged.follow(report, self.workspace)
        if self.judged.label != label:
            self._update_title()
        checks = self.panes.checks
        if stale is not None and checks is not None:
            checks.mark_stale(stale)

    def _recheck_watched_loop(self) -> None:
        """A loop that `minigpt.watch` records is re-judged as it goes: the loop checks and the curve,
        when its log grew since the last look."""
        report = self.session.last_report
        if not self.panes or report is None or self.checks.running:
            return
        if self.loop_log.grew(self.workspace.loop_log):
            self.run_checks(disk_watch.loop_recheck(report))

    # -- actions ----------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        typing = focus.typing_in_field(self.focused)
        if action == "leave_field":
            return typing
        if action == "enter_field":
            return not typing
        return not (action in focus.ONE_KEY_ACTIONS and typing)

    def action_show_pane(self, pane_id: str) -> None:
        if not self.panes:
            return
        self.query_one(TabbedContent).active = pane_id
        self.call_after_refresh(self._focus_pane, pane_id)

    def _focus_pane(self, pane_id: str) -> None:
        # focusing a widget in another pane makes TabbedContent switch to it: a late call
        # (from on_mount, under load) must not undo a pane key pressed in the meantime
        tabs = self.query_one(TabbedContent)
        if tabs.active == pane_id:
            focus.focus_pane(tabs, self.panes.get(pane_id))

    def action_leave_field(self) -> None:
        focus.leave_field(self.query_one(TabbedContent))

    def action_enter_field(self) -> None:
        if self.panes:
            tabs = self.query_one(TabbedContent)
            focus.enter_field(tabs, self.panes.get(tabs.active))

    def action_run_all(self) -> None:
        self.run_checks()

    def action_command_palette(self) -> None:
        if self.use_command_palette and not SteadyCommandPalette.is_open(self):
            self.push_screen(SteadyCommandPalette(id="--command-palette"))

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
        loss = self.panes.loss
        if loss is not None:
            loss.toggle_training()  # starting asks first; the Loss pane's line shows the run

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
        opts = self._option_args
        if event.worker.group == "tokenizer" and not opts.get("tokenizer"):
            if not has_tokenizer(self.workspace, opts.get("model_spec")):
                return  # a folder without a tokenizer (a watched loop's): the Tokenizer pane says so in place
        self.notify(text, title="error", severity="error", timeout=10, markup=False)
        checks = self.panes.checks
        if event.worker.group == "checks" and checks is not None:
            checks.show_run_failed(type(error).__name__)

    def stop_threads(self) -> None:
        """Tell every thread to stop at its next check: a thread that ignores cancel keeps the process alive."""
        self.checks.cancel()
        self.setup.cancel.set()

    async def action_quit(self) -> None:
        """Quit; with the UI's training run going, ask first: stop it, leave it running, or stay (quit_flow.py)."""
        if self.training.training:
            quit_flow.ask(self, self.training, self._answer_quit)
            return
        self.stop_threads()
        self.exit()

    async def _answer_quit(self, choice: str | None) -> None:
        if await quit_flow.settle(self, self.training, choice):
            self.stop_threads()
            self.exit()

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, (events.Key, events.MouseDown)):
            self.idle_gc.input_seen()
        await super().on_event(event)

    def on_unmount(self) -> None:
        self.idle_gc.stop()
        self.process.restore()
        self.stop_threads()
        self.training.interrupt()  # quit asked "stop or leave it?" first; here nobody could answer
