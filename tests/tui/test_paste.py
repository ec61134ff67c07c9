"""A paste larger than a field holds is cut to fit, with a notification saying what was left out:
a 1 MB paste once held the UI for a minute and every key after it for seconds, and a multi-line
paste lost all but its first line without a word."""

from __future__ import annotations

from textual import events
from textual.app import App, ComposeResult
from textual.widgets import Input

from minigpt_tui.panes.sampler import PROMPT_MAX_CHARS
from minigpt_tui.panes.tokenizer import TEXT_MAX_CHARS, TokenizerPane
from minigpt_tui.widgets.bounded_input import BoundedInput, paste_notice
from minigpt_tui.widgets.settings_grid import CELL_MAX_CHARS, SettingsGrid
from tests.waiting import wait_until

from .conftest import SIZE, record_notifications

MEGABYTE_LINE = "the quick brown fox é " * 50_000  # 1.1 M characters, one line


def test_the_notice_says_what_a_paste_lost():
    assert paste_notice("abc", 3, 10, "the prompt") is None
    assert paste_notice("abcdef", 4, 4, "the prompt") == (
        "pasted text: kept 4 of its 6 characters (the prompt holds at most 4)"
    )
    assert paste_notice("ab\ncd\nef", 2, 10, "the prompt") == (
        "pasted text: kept its first line of 3 (the field holds one line)"
    )


class FieldApp(App[None]):
    def compose(self) -> ComposeResult:
        yield BoundedInput("ab", id="field", max_length=10, what="the field")
        yield SettingsGrid([("t", "temperature")], ["A"], {("A", "t"): "1.0"}, corner="setting")


async def test_a_paste_is_cut_to_what_fits_around_the_text_already_there():
    app = FieldApp()
    async with app.run_test(size=(60, 10)) as pilot:
        made = record_notifications(app)
        field = app.query_one("#field", BoundedInput)
        field.focus()
        field.cursor_position = 1  # between a and b
        app.post_message(events.Paste("0123456789xyz\nsecond line"))
        await wait_until(pilot, lambda: field.value == "a01234567b", what="the paste, cut to 10 characters")
        await wait_until(pilot, lambda: bool(made), what="the notification")
        assert made == [
            (
                "warning",
                "pasted text: kept 8 of its 13 characters (the field holds at most 10);"
                " kept its first line of 2 (the field holds one line)",
            )
        ]


async def test_a_megabyte_pasted_into_a_setting_is_cut_to_a_cell():
    app = FieldApp()
    async with app.run_test(size=(60, 10)) as pilot:
        made = record_notifications(app)
        grid = app.query_one(SettingsGrid)
        grid.focus()
        app.post_message(events.Paste(MEGABYTE_LINE))
        await wait_until(pilot, lambda: len(grid.text("A", "t")) == CELL_MAX_CHARS, what="the cut paste")
        await wait_until(pilot, lambda: bool(made), what="the notification")
        assert f"kept {CELL_MAX_CHARS} of its {len(MEGABYTE_LINE):,} characters (a setting holds" in made[0][1]


async def test_a_megabyte_pasted_into_the_prompt_and_the_tokenizer_leaves_keys_working(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        made = record_notifications(app)
        await pilot.press("7")
        prompt = app.query_one("#prompt", Input)
        await wait_until(pilot, lambda: prompt.is_mounted and prompt.display, what="the Sampler's prompt")
        prompt.focus()
        prompt.value = ""
        app.post_message(events.Paste(MEGABYTE_LINE))
        await wait_until(pilot, lambda: len(prompt.value) == PROMPT_MAX_CHARS, what="the prompt, cut to its limit")
        await pilot.press("backspace", "backspace")  # keys after the paste are the field's, in order
        await wait_until(pilot, lambda: len(prompt.value) == PROMPT_MAX_CHARS - 2, what="two characters deleted")
        assert prompt.value == MEGABYTE_LINE[: PROMPT_MAX_CHARS - 2]
        await wait_until(pilot, lambda: any("the prompt holds at most" in m for _, m in made), what="the notice")

        await pilot.press("escape", "3")
        pane = app.query_one(TokenizerPane)
        await wait_until(pilot, lambda: pane.tokenizer is not None, what="the tokenizer")
        text = app.query_one("#tok-input", Input)
        text.focus()
        app.post_message(events.Paste(MEGABYTE_LINE + "\nmore"))
        await wait_until(pilot, lambda: len(text.value) == TEXT_MAX_CHARS, what="the text, cut to its limit")

        def encoded() -> int:  # the characters encoded, and those flagged as outside the vocabulary
            return len(pane.last_ids) + sum(len(at) for at in pane.last_unknown.values())

        await wait_until(pilot, lambda: encoded() == TEXT_MAX_CHARS, what="the cut text encoded")
        notice = next(m for _, m in made if "the text to encode holds" in m)
        assert "kept its first line of 2" in notice
