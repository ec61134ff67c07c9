"""Where the keyboard focus goes in the workbench: into a pane when it is shown (its first
focusable widget, never a text field: typing there would swallow the pane keys), out of a text
field and back with escape, and the app's one-key bindings held back while a visible text field
has the focus (a digit, letter or ? typed there belongs to the field). A pane's widgets are found
in the screen's focus chain (Textual's order of focusable widgets): nothing here looks inside a pane."""

from __future__ import annotations

from collections.abc import Iterator

from textual.widget import Widget
from textual.widgets import Input, TabbedContent

from minigpt_tui.widgets.form_button import FormButton
from minigpt_tui.widgets.settings_grid import SettingsGrid

# the widgets that take typed text: a line of text, a grid of cells
TEXT_FIELDS = (Input, SettingsGrid)
# and those whose typed characters go to a text field: the footer must not promise one-key actions there
TYPING_INTO_FIELD = (*TEXT_FIELDS, FormButton)

# the app's actions bound to a digit, a letter or ?: a text field takes those keys as text
ONE_KEY_ACTIONS = ("show_pane", "run_all", "fault_menu", "export", "toggle_training", "help", "quit")


def typing_in_field(focused: Widget | None) -> bool:
    """A visible text field, or a form button that types into one, has the focus (a widget of a
    pane not shown yet has no area)."""
    return isinstance(focused, TYPING_INTO_FIELD) and focused.region.area > 0


def _focusable_in(tabs: TabbedContent, pane: Widget | None) -> Iterator[Widget]:
    """The widgets of `pane` (itself first) that take the focus, in its screen's focus order."""
    if pane is not None:
        yield from (w for w in tabs.screen.focus_chain if pane in w.ancestors_with_self)


def focus_pane(tabs: TabbedContent, pane: Widget | None) -> None:
    """The pane's first focusable widget, or the tab bar when that is a text field or there is
    none (`pane` None: a key pressed before the hidden panes were built)."""
    focusable = next(_focusable_in(tabs, pane), None)
    if focusable is not None and not isinstance(focusable, TEXT_FIELDS):
        focusable.focus()
    else:
        tabs.query_one("Tabs").focus()


def leave_field(tabs: TabbedContent) -> None:
    """escape in a text field: to the tab bar, where digits and letters are keys again."""
    tabs.query_one("Tabs").focus()


def enter_field(tabs: TabbedContent, pane: Widget | None) -> None:
    """escape with the focus outside a text field: into the pane's first field, if it has one."""
    field = next((w for w in _focusable_in(tabs, pane) if isinstance(w, TEXT_FIELDS)), None)
    if field is not None:
        field.focus()
