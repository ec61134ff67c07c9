"""Pane 7: sample from the model with two sets of settings side by side.

The settings are one grid of cells (widgets/settings_grid.py). Numbers are parsed as they are
typed and checked on the UI thread by `minigpt.sample.settings.validate` (torch-free), whose
`SamplerSettings` also gives the defaults (sampler_form.py); the prompt is checked against the
tokenizer (sampler_prompt.py). Generation streams into the pane from a thread worker
(sampler_run.py) with the model the checks loaded (sampler_model.py); the next-token
distribution after each filter stage comes from `filter_stages` (one table per column), and the
output's repetition from `repetition_report`.
"""

from __future__ import annotations

import threading

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Container, Horizontal, Vertical, VerticalScroll
from textual.events import Key
from textual.widgets import Button, Input, Static
from textual.worker import Worker, WorkerState, get_current_worker

from minigpt.data.tokenizer_api import Tokenizer
from minigpt_tui.host import host, session_of
from minigpt_tui.panes.sampler_form import (
    COLUMNS,
    FIELDS,
    Column,
    column_title,
    default_settings,
    read_settings,
    report_line,
)
from minigpt_tui.panes.sampler_model import ModelCache
from minigpt_tui.panes.sampler_prompt import PROMPT_REFUSED, VocabLoaded, prompt_check, read_vocab, unknown_chars
from minigpt_tui.panes.sampler_run import (
    SampleFinished,
    SamplerFailed,
    StagesComputed,
    TextGenerated,
    next_token_stages,
    stream_samples,
    token_labeller,
    widest_label,
)
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.bounded_input import BoundedInput
from minigpt_tui.widgets.form_button import FormButton
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.prob_bars import StageBars
from minigpt_tui.widgets.settings_grid import SettingsGrid
from minigpt_tui.widgets.status import visible_output

# longer than the context of the models this tool is for (a prompt is cut to the model's block
# before generating); the prompt is checked against the tokenizer at every key
PROMPT_MAX_CHARS = 8000


class ResultBlock(Container, can_focus=True):
    """A part of the results that Tab stops at (the outputs, the next-token tables): the focus
    scrolls it into view, and the pane's scroll keys work from it (they go up to the pane)."""


class SamplerPane(VerticalScroll):
    """Prompt, settings A and B, streamed outputs, repetition metrics and filter stages.

    Taller than an 80x24 terminal after a run: the pane itself takes the focus when shown, so the scroll keys (arrows,
    page up/down, home/end) work at once, and Tab goes through the prompt, the buttons, the
    settings, then the outputs and the next-token tables.

    A form for words: a printable key typed on one of its buttons goes into the prompt, never to
    the app's one-letter keys (`q` would quit)."""

    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)

    DEFAULT_CSS = """
    SamplerPane { height: 1fr; }
    SamplerPane #prompt-row { height: auto; }
    SamplerPane #prompt { width: 1fr; }
    SamplerPane #prompt-check, SamplerPane #sampler-status, SamplerPane #settings-notes, SamplerPane #field-errors {
        height: auto; padding: 0 1;
    }
    SamplerPane #settings { padding: 0 1; }
    SamplerPane #field-errors { display: none; }
    SamplerPane ResultBlock { height: auto; }
    SamplerPane #outputs { layout: horizontal; }
    SamplerPane .output-col { width: 1fr; height: auto; padding: 0 1; }
    SamplerPane .output { height: auto; min-height: 3; }
    SamplerPane StageBars { padding: 0 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.chars: list[str] | None = None
        self.tokenizer: Tokenizer | None = None  # set once loaded, whatever its kind
        self.unknown: dict[str, list[int]] = {}
        self.columns = {c: Column() for c in COLUMNS}
        self.model_note = ""
        self._stopped = False  # the user pressed Stop during the current run
        self._run_id = 0
        self._run_columns: tuple[str, ...] = ()  # the columns the current run generates
        self._cancel = threading.Event()
        self._models = ModelCache()  # loaded on the first generate, kept while the checks' context stands

    # -- layout ---------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        prompt, defaults = "The ", default_settings()  # the session's own arrive with the vocabulary
        with Horizontal(id="prompt-row"):
            # no select-all on focus: a key typed on a button is appended (focus moves there first)
            yield BoundedInput(
                prompt,
                placeholder="prompt (enter generates A)",
                id="prompt",
                compact=True,
                select_on_focus=False,
                max_length=PROMPT_MAX_CHARS,
                what="the prompt",
            )
            yield FormButton("Generate A", id="generate", compact=True)
            yield FormButton("Compare A/B", id="compare", compact=True)
            yield FormButton("Stop", id="stop", compact=True)
        yield LiveStatic("", id="prompt-check", markup=False)
        yield SettingsGrid(
            [(field, label) for field, label, _ in FIELDS],
            COLUMNS,
            {(col, field): _shown(value) for col in COLUMNS for field, value in defaults[col].items()},
            fixed={("B", "seed"): "same as A"},
            corner="setting",
            id="settings",
        )
        yield LiveStatic("", id="field-errors", markup=False)
        yield LiveStatic("", id="settings-notes", markup=False)
        yield LiveStatic("model: loaded on first generate", id="sampler-status", markup=False)
        with ResultBlock(id="outputs"):
            for col in COLUMNS:
                with Vertical(classes="output-col"):
                    yield LiveStatic(f"{col}:", id=f"{col}-title", markup=False)
                    yield LiveStatic("", id=f"{col}-output", classes="output", markup=False)
                    yield LiveStatic("", id=f"{col}-report", markup=False)
        with ResultBlock(id="stages"):
            yield StageBars(id="stages-A")
            yield StageBars(id="stages-B")

    def on_mount(self) -> None:
        self.query_one("#stages-B", StageBars).clear()  # B's bars appear with an A/B run
        for col in COLUMNS:
            self._parse_column(col)
        # after the first frame: building the options imports torch, which holds the GIL for a while
        self.call_after_refresh(self._load_vocab)

    def on_key(self, event: Key) -> None:
        typed = event.is_printable and event.character and event.character != " "  # space presses a button
        if typed and isinstance(self.app.focused, FormButton):
            event.stop()
            event.prevent_default()
            prompt = self.query_one("#prompt", Input)
            prompt.insert(event.character or "", len(prompt.value))
            prompt.cursor_position = len(prompt.value)
            prompt.focus()

    # -- vocabulary and prompt --------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="sampler-vocab")
    def _load_vocab(self) -> None:
        self.post_message(read_vocab(host(self).session, host(self).workspace))

    @on(VocabLoaded)
    def _vocab_loaded(self, message: VocabLoaded) -> None:
        self.chars = message.chars
        self.tokenizer = message.tokenizer
        if message.error:
            self._status(message.error, problem=message.problem)
        if message.defaults:  # only fields still at the built-in default: never overwrite typing
            built_in, grid = default_settings(), self.query_one(SettingsGrid)
            for col in COLUMNS:
                for field, _, _ in FIELDS:
                    if field == "seed" and col == "B":
                        continue
                    old, new = built_in[col][field], message.defaults[col][field]
                    if grid.text(col, field) == _shown(old) and new != old:
                        grid.set_text(col, field, _shown(new))
            prompt = self.query_one("#prompt", Input)
            if prompt.value == "The " and message.defaults["prompt"]:
                prompt.value = message.defaults["prompt"]
        self._check_prompt()
        for col in COLUMNS:
            self._parse_column(col)

    @on(Input.Changed, "#prompt")
    def _check_prompt(self) -> None:
        prompt = self.query_one("#prompt", Input).value
        self.unknown = unknown_chars(prompt, self.chars)
        self.query_one("#prompt-check", Static).update(prompt_check(prompt, self.chars, self.tokenizer, self.unknown))
        fixed = self.chars is not None and not self.unknown
        if fixed and PROMPT_REFUSED in str(self.query_one("#sampler-status", Static).content):
            self._status("prompt fixed: ready to generate")  # the refusal no longer applies

    # -- settings ---------------------------------------------------------------------------
    @on(SettingsGrid.Changed)
    def _setting_changed(self, event: SettingsGrid.Changed) -> None:
        for col in COLUMNS if event.row == "seed" else (event.column,):  # A's seed is B's too
            self._parse_column(col)

    def _parse_column(self, col: str) -> None:
        grid = self.query_one(SettingsGrid)
        texts = {f: grid.text("A" if f == "seed" else col, f) for f, _, _ in FIELDS}
        column = self.columns[col]
        vocab = self.tokenizer.vocab_size if self.tokenizer is not None else 1 << 30
        column.values, column.errors, column.notes = read_settings(texts, vocab)
        self._show_errors()
        self._show_notes()

    def _show_notes(self) -> None:
        """Warnings for the settings as they are now: a fixed value takes its warning with it."""
        lines = [f"{col}: {note}" for col in COLUMNS for note in self.columns[col].notes]
        notes = self.query_one("#settings-notes", Static)
        notes.update(Text("\n".join(f"! {line}" for line in lines), style="yellow") if lines else "")
        notes.display = bool(lines)  # no blank line when all is well

    def _show_errors(self) -> None:
        self.query_one(SettingsGrid).mark_invalid(
            ("A" if f == "seed" else c, f) for c in COLUMNS for f in self.columns[c].errors
        )
        labels = {name: label for name, label, _ in FIELDS}
        lines = [  # a message names its field first (by name or label), unless it says it here
            f"x {c}: {msg}" if msg.startswith((f, labels[f])) else f"x {c} {labels[f]}: {msg}"
            for c in COLUMNS
            for f, msg in self.columns[c].errors.items()
        ]
        errors = self.query_one("#field-errors", Static)
        errors.update(Text("\n".join(lines)) if lines else "")
        errors.display = bool(lines)  # no blank line when all is well

    # -- generation -------------------------------------------------------------------------
    @on(Button.Pressed, "#generate")
    @on(Input.Submitted)
    @on(SettingsGrid.Submitted)
    def _generate_pressed(self) -> None:
        self.generate(("A",))

    @on(Button.Pressed, "#compare")
    def compare(self) -> bool:
        """Generate with A and B on the same seed, one after the other."""
        return self.generate(COLUMNS)

    @on(Button.Pressed, "#stop")
    def stop(self) -> None:
        running = any(self.columns[c].report is None for c in self._run_columns)
        self._cancel.set()
        self.workers.cancel_group(self, "sampler-generate")
        if running:
            self._stopped = True
            self._status("stopped")
        else:
            self._status("nothing to stop: no generation is running")

    def generate(self, columns: tuple[str, ...] = ("A",)) -> bool:
        """Start generating for `columns`; False (with the reason shown) when the input is invalid."""
        prompt = self.query_one("#prompt", Input).value
        bad = [f"{col}: {m}" for col in columns for m in self.columns[col].errors.values()]
        if bad:
            self._status("fix the marked settings first: " + "; ".join(bad), problem=True)
            return False
        if not prompt:
            self._status("the prompt is empty: generation needs at least one character", problem=True)
            return False
        if self.unknown:
            self._status(PROMPT_REFUSED, problem=True)
            return False
        self._run_id += 1
        self._cancel = threading.Event()
        self._run_columns = tuple(columns)
        self._stopped = False
        for col in columns:
            self.columns[col].output, self.columns[col].report = "", None
            self.query_one(f"#{col}-report", Static).update("")  # the last run's metrics describe the last text
            self._show_output(col, running=True)
        for col in COLUMNS:
            if col not in columns:  # bars of an earlier A/B run would pass for this run's
                self.columns[col].stages = None
                self.query_one(f"#stages-{col}", StageBars).clear()
        self._status("generating...")
        self._run(self._run_id, prompt, [(col, dict(self.columns[col].values)) for col in columns], self._cancel)
        return True

    @work(thread=True, exclusive=True, exit_on_error=False, group="sampler-generate")
    def _run(self, run_id: int, prompt: str, columns: list[tuple[str, dict]], cancel: threading.Event) -> None:
        from minigpt.errors import MiniGPTError
        from minigpt.sample.generate import SamplerSettings, encode_prompt
        from minigpt.threads import apply as apply_thread_policy

        apply_thread_policy("sample")  # per thread: OpenMP keeps the count for the thread that set it
        worker = get_current_worker()
        try:
            model, tokenizer, note, eot, vocab_limit = self._models.load(session_of(self).context)
            ids = encode_prompt(tokenizer, prompt)
            settings = {col: SamplerSettings(**values) for col, values in columns}
            for col, _ in columns:  # A/B: the filter stages of each column's settings
                stages = next_token_stages(model, ids, settings, token_labeller(tokenizer), col)
                title = f"next token after the prompt, settings {col} ({note})"
                self.post_message(StagesComputed(run_id, stages, title, col, note, widest_label(tokenizer)))
            stream_samples(
                self.post_message,
                run_id,
                model,
                ids,
                settings,
                tokenizer,
                lambda: worker.is_cancelled or cancel.is_set(),
                eot=eot,
                vocab_limit=vocab_limit,
            )
        except MiniGPTError as exc:
            self.post_message(SamplerFailed(run_id, str(exc)))

    @on(StagesComputed)
    def _stages_computed(self, message: StagesComputed) -> None:
        if message.run_id == self._run_id:
            self.columns[message.column].stages = message.stages
            self.model_note = message.model_note
            self.query_one(f"#stages-{message.column}", StageBars).show(message.stages, message.title, message.widest)

    @on(TextGenerated)
    def _text_generated(self, message: TextGenerated) -> None:
        if message.run_id == self._run_id:
            self.columns[message.column].output += message.text
            self._show_output(message.column, running=True)

    @on(SampleFinished)
    def _sample_finished(self, message: SampleFinished) -> None:
        if message.run_id != self._run_id:
            return
        column = self.columns[message.column]
        column.report = message.report
        self._show_output(message.column, running=False)
        self.query_one(f"#{message.column}-report", Static).update(report_line(message.report))
        # done only when every column of this run has reported (B may still be streaming)
        if self._stopped:
            self._status(f"stopped after {len(column.output)} characters ({self.model_note})")
        elif all(self.columns[c].report is not None for c in self._run_columns):
            self._status(f"done ({self.model_note})")

    @on(SamplerFailed)
    def _sampler_failed(self, message: SamplerFailed) -> None:
        if message.run_id == self._run_id:
            self._status(f"cannot generate: {message.error}", problem=True)
            for col in self._run_columns:
                self._show_output(col, running=False)  # no column stays marked as running

    @on(Worker.StateChanged)
    def _worker_failed(self, event: Worker.StateChanged) -> None:
        if event.worker.group.startswith("sampler") and event.state == WorkerState.ERROR:
            self._status(f"{event.worker.group} failed: {event.worker.error!r}", problem=True)

    def _show_output(self, col: str, running: bool) -> None:
        seed = self.columns["A"].values.get("seed")
        self.query_one(f"#{col}-title", Static).update(column_title(col, self.columns[col].values, seed, running))
        prompt = self.query_one("#prompt", Input).value
        output = visible_output(self.columns[col].output)
        self.query_one(f"#{col}-output", Static).update(Text(prompt, style="dim") + output)

    def _status(self, text: str, problem: bool = False) -> None:
        self.query_one("#sampler-status", Static).update(
            Text(("! " if problem else "") + text, style="bold red" if problem else "")
        )


def _shown(value: object) -> str:
    """A setting as its cell shows it: None (off) as an empty cell."""
    return "" if value is None else str(value)
