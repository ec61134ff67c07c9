"""Containers drawn as plain background: Textual's `Widget.BLANK`.

On a pane switch Textual draws every widget of the shown stack, each container too (its background
under its children), and the switch clears those containers' line caches: the pane shown, its tab,
the tabs widget change size or scrollable size. A container with `BLANK` set is drawn as one
background strip repeated instead of line by line through its styles, a cheaper switch frame
(docs/performance.md).
`BLANK` skips the widget's border, content and the app's line filters, so it is for containers
without a border of their own, and off while a filter recolours the whole screen (NO_COLOR's
monochrome, TEXTUAL_FILTERS=dim): a blank background would keep its colour there."""

from __future__ import annotations

import os
from collections.abc import Mapping

from textual import constants
from textual.containers import Container
from textual.widgets import Header


def blank_allowed(environ: Mapping[str, str], filters: str) -> bool:
    """Whether containers may be drawn blank: no whole-screen colour filter (Textual reads the same
    two settings, `NO_COLOR` and `TEXTUAL_FILTERS`, when the app starts)."""
    return "NO_COLOR" not in environ and not filters.strip()


BLANK_CONTAINERS = blank_allowed(os.environ, constants.FILTERS)


class BlankContainer(Container):
    """A plain container drawn blank (the footer's bar)."""

    BLANK = BLANK_CONTAINERS


class BlankHeader(Header):
    """Textual's header (its icon, title and clock are its children), drawn blank beneath them."""

    BLANK = BLANK_CONTAINERS
