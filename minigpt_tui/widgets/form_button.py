"""A button of a form that has a text field: characters typed while it has the focus belong to the
field (the form moves them there), so the app's one-key bindings are held back as in the field."""

from __future__ import annotations

from textual.widgets import Button


class FormButton(Button):
    """A Button whose owner sends typed characters to its text field (space and enter press it)."""
