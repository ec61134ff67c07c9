"""`?`: every key, made from the bindings the app and the panes declare (so the list cannot miss
one), in longer words than the footer's labels; the keys that are no binding of ours (a field's
enter, Tab, scrolling) are written out."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Static, TabPane

from minigpt_tui.screens.answer_once import AnswerOnceScreen

# the help's words per action (its name without arguments); "{}" takes the bindings' own labels.
# An action missing here shows its footer label: never a key without words.
HELP_TEXT = {
    "show_pane": "switch pane: {}",
    "run_all": "re-run all checks",
    "fault_menu": "fault menu: inject a fault (or clear it) and re-run the checks",
    "export": "export the report JSON to <workspace>/reports/",
    "toggle_training": "start / stop a training run (it shows on the Loss pane)",
    "help": "this help",
    "quit": "quit (asks first while a training run started here is going)",
    "leave_field": "in a text field: out of it, to the tab bar (the keys above work again)",
    "enter_field": "elsewhere: into the shown pane's text field",
    "command_palette": "command palette: every action, one command per check and per fault",
    "open_filter": "filter the table as you type",
    "keep_filter": "in the filter: keep it, back to the table",
    "clear_filter": "clear the filter",
    "rerun_highlighted": "re-run the highlighted check",
    "cursor_down": "next row",
    "cursor_up": "previous row",
    "row": "previous / next row",
    "new_batch": "draw a new batch",
    "switch_source": "switch between the training run's gradients and the gradients check's fresh model",
    "sort": "sort by name, gradient norm, update/weight ratio (again: reverse)",
    "start_training": "start a training run with the workspace's own settings",
    "stop_training": "stop the training run started here",
    "toggle_log": "log scale",
    "cycle_ema": "EMA smoothing (again: 0.6, 0.9, 0.98, off)",
    "cycle_zoom": "zoom to the last 2000 / 500 / 100 steps",
    "toggle_previous": "overlay the newest earlier runs from previous/",
    "toggle_samples": "the run's samples by step beside the plot",
    "scroll_pane": "on the tab bar: page the shown pane, or take it to its top / end",
}
# keys that are not our bindings: Textual's focus and scrolling, and what a pane does with a field
MOVING = [
    ("tab shift+tab", "next / previous place in the pane: a field, a button, a table, a block of results"),
    ("↑ ↓ pgup pgdn", "scroll what has the focus, or the pane around it"),
    ("home end", "scroll to the top / the end"),
]
NOT_BINDINGS = {
    "tokenizer": [("tab", "into the text field: type to see the IDs")],
    "sampler": [
        ("tab", "into the prompt; on through the buttons, the settings, the outputs, the next-token tables"),
        ("⏎", "in a field: generate with settings A (the buttons: Compare A/B, Stop)"),
        ("← ↑ ↓ →", "in the settings: move between cells; a typed value replaces the cell's"),
        ("⌫ del", "in the settings: edit / empty the cell"),
        ("a letter", "typed with a button focused: goes into the prompt"),
    ],
}


def declared_bindings(widgets: Iterable[Widget | App]) -> list[Binding]:
    """The bindings the classes of `widgets` declare, each class once: ours, and Textual's App's
    (ctrl+q); not those of Textual's widgets (the cursor, scrolling and editing keys: MOVING)."""
    seen: set[type] = set()
    found: list[Binding] = []
    for widget in widgets:
        for cls in type(widget).__mro__:
            ours = cls.__module__.partition(".")[0] != "textual" or cls is App
            if ours and cls not in seen and "BINDINGS" in vars(cls):
                seen.add(cls)
                found += [b for b in Binding.make_bindings(vars(cls)["BINDINGS"]) if not b.system]
    return found


def key_rows(app: App, bindings: list[Binding]) -> list[tuple[str, str]]:
    """One row per action (its name without arguments), its keys in declared order; the same key
    for the same action (a pane's escape and its filter line's) once."""
    rows: dict[str, tuple[list[str], list[str]]] = {}
    seen: set[tuple[str, str]] = set()
    for binding in bindings:
        if (binding.key, binding.action) in seen:
            continue
        seen.add((binding.key, binding.action))
        keys, labels = rows.setdefault(binding.action.split("(")[0], ([], []))
        keys.append(app.get_key_display(binding))
        if binding.description not in labels:
            labels.append(binding.description)
    return [
        (" ".join(keys), HELP_TEXT.get(action, "{}").format(", ".join(labels)))
        for action, (keys, labels) in rows.items()
    ]


def key_sections(app: App, panes: list[tuple[str, str]]) -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, rows) for the whole app, then each of `panes` ((tab id, title), key N the Nth) on the
    main screen that has keys of its own."""
    workbench = list(app.screen_stack[0].query("#tabs"))  # the tab bar's own keys (workbench.Workbench)
    everywhere = key_rows(app, declared_bindings([app, *workbench]))
    if app.ENABLE_COMMAND_PALETTE:
        palette = Binding(app.COMMAND_PALETTE_BINDING, "command_palette", key_display=app.COMMAND_PALETTE_DISPLAY)
        everywhere.append((app.get_key_display(palette), HELP_TEXT["command_palette"]))
    sections = [("everywhere", everywhere + MOVING)]
    tabs = {tab.id: tab for tab in app.screen_stack[0].query(TabPane)}
    for n, (pane_id, title) in enumerate(panes, start=1):
        tab = tabs.get(pane_id)
        rows = key_rows(app, declared_bindings(tab.query("*"))) if tab is not None else []
        rows += NOT_BINDINGS.get(pane_id, [])
        if rows:
            sections.append((f"{n} {title}", rows))
    return sections


class HelpScreen(AnswerOnceScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss_help", "Close")]

    def __init__(self, panes: list[tuple[str, str]]) -> None:
        super().__init__()
        self.panes = panes  # (tab id, title) in the order of the number keys

    def compose(self) -> ComposeResult:
        table = Table(title="minigpt-tui keys", show_header=False, box=None, padding=(0, 2), title_style="bold")
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for title, rows in key_sections(self.app, self.panes):
            table.add_row(Text(title, style="bold underline"), "")
            for key, what in rows:
                table.add_row(Text(key), Text(what))
        with VerticalScroll(id="help-box", classes="modal-box"):
            yield Static(table, id="help-keys")
            yield Static(
                Text(
                    "Keys typed into a text field go into the field (in the Sampler, also with a button\n"
                    "focused); escape leaves the field, and the keys above work again.\n"
                    "↑ ↓ page up/down scroll this help; escape, ? or q close it.",
                    style="dim",
                )
            )

    def on_mount(self) -> None:
        self.query_one("#help-box").focus()  # the arrow keys scroll at once, no Tab first

    def action_dismiss_help(self) -> None:
        self.answer(None)
