"""Pilot tests for the sampler pane (7), on a fresh (untrained) debug-size model."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Static, TabbedContent

from minigpt.checks import CheckOptions
from minigpt_tui.panes.sampler import SamplerPane
from minigpt_tui.session import Session
from minigpt_tui.widgets.prob_bars import StageBars
from minigpt_tui.widgets.settings_grid import SettingsGrid
from tests.waiting import eventually, wait_until

from ._pane_harness import PaneHarness


def _app(ws) -> PaneHarness:
    return PaneHarness(SamplerPane, ws, session=Session(CheckOptions(workspace=ws.root, device="cpu")))


async def _set(pilot, pane, selector: str, value: str) -> None:
    """`#prompt`, or a settings cell named `#<column>-<field>`."""
    if selector == "#prompt":
        pane.query_one(selector, Input).value = value
    else:
        pane.query_one(SettingsGrid).set_text(*selector[1:].split("-", 1), value)
    await pilot.pause()  # the change's message handled (its handler parses in place), not a sleep


def _text(pane, selector: str) -> str:
    return str(pane.query_one(selector, Static).render())


async def test_invalid_temperature_shows_an_inline_message_and_does_not_generate(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await _set(pilot, pane, "#A-temperature", "abc")
        assert "x A: temperature: 'abc' is not a number" in _text(pane, "#field-errors")
        assert pane.query_one(SettingsGrid).is_invalid("A", "temperature")
        assert pane.generate(("A",)) is False
        assert "fix the marked settings" in _text(pane, "#sampler-status")

        await _set(pilot, pane, "#A-temperature", "-1")  # parses, but validate() rejects it (in a worker)
        await wait_until(pilot, lambda: "x A: temperature must be" in _text(pane, "#field-errors"))
        assert pane.generate(("A",)) is False

        await _set(pilot, pane, "#A-temperature", "0.8")
        await wait_until(pilot, lambda: not pane.columns["A"].errors)
        assert not pane.query_one(SettingsGrid).is_invalid("A", "temperature")


async def test_prompt_characters_missing_from_the_vocabulary_are_flagged(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await wait_until(pilot, lambda: pane.chars is not None)
        missing = next(ch for ch in "\u2603\u00e9\u4e2d~" if ch not in pane.chars)
        await _set(pilot, pane, "#prompt", f"The {missing}x")
        assert missing in pane.unknown and pane.unknown[missing] == [4]
        check = _text(pane, "#prompt-check")
        assert "not in the vocabulary" in check and "^" in check
        assert pane.generate(("A",)) is False
        assert "never seen" in _text(pane, "#sampler-status")
        await _set(pilot, pane, "#prompt", "The x")
        assert not pane.unknown
        assert "never seen" not in _text(pane, "#sampler-status")  # the refusal does not linger


async def test_generates_text_and_shows_filter_stages_with_fewer_survivors_after_top_k(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await wait_until(pilot, lambda: pane.chars is not None)
        await _set(pilot, pane, "#A-top_k", "5")
        await _set(pilot, pane, "#A-max_new_tokens", "40")
        await wait_until(pilot, lambda: not pane.columns["A"].errors)
        grid = pane.query_one(SettingsGrid)
        grid.focus()
        grid.move_to("A", "max_new_tokens")
        await pilot.press("enter")  # enter in any field generates A
        assert pane._run_id == 1
        await wait_until(pilot, lambda: pane.columns["A"].report is not None)
        assert len(pane.columns["A"].output) == 40
        assert pane.columns["A"].output in _text(pane, "#A-output")
        assert "repetition" in _text(pane, "#A-report") and "distinct-1" in _text(pane, "#A-report")
        survivors = {s["name"]: s["survivors"] for s in pane.columns["A"].stages or []}
        assert survivors["model"] == len(pane.chars) and survivors["top-k"] == 5
        assert "5 left" in pane.query_one(StageBars).plain()
        assert "FRESH MODEL" in pane.model_note


async def test_compare_generates_a_and_b_on_the_same_seed(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        for col, temp in (("A", "1.0"), ("B", "0")):
            await _set(pilot, pane, f"#{col}-temperature", temp)
            await _set(pilot, pane, f"#{col}-max_new_tokens", "30")
        await wait_until(
            pilot, lambda: not pane.columns["A"].errors and not pane.columns["B"].errors and pane.chars is not None
        )
        await pilot.click("#compare")
        await wait_until(pilot, lambda: all(pane.columns[c].report is not None for c in "AB"))
        assert len(pane.columns["A"].output) == len(pane.columns["B"].output) == 30
        assert pane.columns["B"].values["seed"] == pane.columns["A"].values["seed"]
        first_a = pane.columns["A"].output
        assert pane.compare()  # same seed again: the same text
        await wait_until(pilot, lambda: pane.columns["A"].report is not None and pane.columns["B"].report is not None)
        assert pane.columns["A"].output == first_a


async def test_settings_are_validated_at_once_and_a_warning_goes_when_the_value_is_fixed(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await _set(pilot, pane, "#A-temperature", "-1")
        assert "x A: temperature must be" in _text(pane, "#field-errors")  # no worker, no wait
        assert not [w for w in app.workers if w.group.startswith("sampler-validate")]
        await _set(pilot, pane, "#A-temperature", "1.0")
        await _set(pilot, pane, "#A-repetition_penalty", "2.0")
        assert "repetition_penalty 2.0 > 1.3" in _text(pane, "#settings-notes")
        await _set(pilot, pane, "#A-repetition_penalty", "1.1")
        assert "repetition_penalty" not in _text(pane, "#settings-notes")


async def test_defaults_come_from_sampler_settings(demo_ws, monkeypatch):
    from dataclasses import dataclass

    import minigpt_tui.panes.sampler_form as sampler_form
    from minigpt.sample.settings import SamplerSettings

    @dataclass
    class Changed(SamplerSettings):
        max_new_tokens: int = 123
        top_p: float = 0.9

    monkeypatch.setattr(sampler_form, "SamplerSettings", Changed)
    app = PaneHarness(SamplerPane, demo_ws)  # no session: the library's defaults alone
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await pilot.pause()
        grid = pane.query_one(SettingsGrid)

        def defaults():
            assert grid.text("A", "max_new_tokens") == "123"
            assert grid.text("A", "top_p") == "0.9"
            assert grid.text("B", "max_new_tokens") == "123"

        await eventually(pilot, defaults)


async def test_carets_stay_under_unknown_characters_after_wide_ones(demo_ws):
    from rich.cells import cell_len

    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await wait_until(pilot, lambda: pane.chars is not None)
        prompt = "日本😀 T\u2603"
        assert "\u2603" not in pane.chars and "T" in pane.chars
        await _set(pilot, pane, "#prompt", prompt)
        marked, carets = _text(pane, "#prompt-check").split("\n")[:2]
        column = cell_len("prompt: " + prompt[:-1])  # where the snowman starts on screen
        assert carets[column] == "^"
        assert carets[column - 1] == " " and carets[column - 2] == " "  # under "T" and the space: nothing
        assert carets.startswith(" " * 8 + "^" * 6)  # 日 本 😀: two cells each


def test_runs_of_spaces_and_empty_lines_are_visible_in_the_output():
    from minigpt_tui.widgets.status import visible_output

    assert visible_output(" " * 200).plain == "␣" * 200
    assert visible_output("a b").plain == "a b"  # single spaces between words stay spaces
    assert visible_output("a\n\n\nb").plain == "a⏎\n⏎\n\nb"
    assert visible_output("x\ty").plain == "x→y"


@pytest.mark.slow  # a few seconds: the full run (CI) only
async def test_stop_says_stopped_and_a_new_run_clears_the_old_metrics_and_b_bars(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        for col in "AB":
            await _set(pilot, pane, f"#{col}-max_new_tokens", "20")
        await wait_until(pilot, lambda: pane.chars is not None and not pane.columns["A"].errors)
        assert pane.compare()
        await wait_until(pilot, lambda: all(pane.columns[c].report is not None for c in "AB"))
        # A/B: each column's filter stages, B's with its own top-k
        assert all(pane.columns[c].stages for c in "AB")
        assert "settings B" in pane.query_one("#stages-B", StageBars).plain()
        assert "10 left" in pane.query_one("#stages-B", StageBars).plain()
        assert "repetition" in _text(pane, "#A-report")
        await _set(pilot, pane, "#A-max_new_tokens", "100000")
        assert pane.generate(("A",))
        assert _text(pane, "#A-report") == ""  # not the last text's metrics under the new one
        assert pane.query_one("#stages-B", StageBars).plain() == ""
        await wait_until(pilot, lambda: len(pane.columns["A"].output) > 0)
        await pilot.click("#stop")
        await wait_until(pilot, lambda: pane.columns["A"].report is not None)
        status = _text(pane, "#sampler-status")
        assert "stopped after" in status and "done" not in status


async def test_generation_applies_the_thread_policy_in_its_worker_thread(demo_ws, monkeypatch):
    import threading

    from minigpt import threads

    calls: list[tuple[str, bool]] = []
    real = threads.apply
    monkeypatch.setattr(
        threads,
        "apply",
        lambda purpose, **kw: (
            calls.append((purpose, threading.current_thread() is threading.main_thread())),
            real(purpose, **kw),
        )[1],
    )
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await wait_until(pilot, lambda: pane.chars is not None)
        await _set(pilot, pane, "#A-max_new_tokens", "5")
        await wait_until(pilot, lambda: not pane.columns["A"].errors)
        assert pane.generate(("A",))
        await wait_until(pilot, lambda: pane.columns["A"].report is not None)
    # OpenMP keeps the count per thread: set in the worker that generates, not on the UI thread
    assert ("sample", False) in calls


@pytest.mark.slow
async def test_the_outputs_and_next_token_table_are_reached_by_keys_alone_at_80x24(workspace, make_app):
    # GIVEN the app at 80x24, where a finished run's outputs and tables are below the fold
    app = make_app(workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: "sampler" in app.panes and app.panes["sampler"].is_mounted, what="the panes")
        pane = app.panes["sampler"]
        await pilot.press("7")
        await wait_until(pilot, lambda: app.focused is pane, what="the sampler to take the focus")
        await pilot.press("tab", "enter")  # into the prompt; enter generates A
        await wait_until(pilot, lambda: pane.columns["A"].report is not None, what="A's text")
        await wait_until(pilot, lambda: bool(pane.columns["A"].stages), what="A's next-token table")
        table = pane.query_one("#stages-A", StageBars)
        assert not pane.can_view_entire(table)
        # WHEN Tab goes on past the settings THEN the outputs, then the table, come into view
        for block in (pane.query_one("#outputs"), pane.query_one("#stages")):
            for _ in range(len(app.screen.focus_chain)):
                if app.focused is block:
                    break
                await pilot.press("tab")
            assert app.focused is block
            await wait_until(pilot, lambda block=block: pane.can_view_partial(block), what=f"#{block.id} in view")
        await wait_until(pilot, lambda: pane.can_view_entire(table), what="the whole table in view")
        assert pane.scroll_y > 0
        # AND the scroll keys move the pane from there
        await pilot.press("home")
        await wait_until(pilot, lambda: pane.scroll_y == 0, what="home")
        await pilot.press("end")
        await wait_until(pilot, lambda: pane.scroll_y == pane.max_scroll_y > 0, what="end")
        await pilot.press("pageup")
        await wait_until(pilot, lambda: pane.scroll_y < pane.max_scroll_y, what="page up")
        # AND from the pane itself, as a pane key leaves it: digits still switch panes, page down scrolls
        await pilot.press("home", "1")
        await wait_until(pilot, lambda: app.query_one(TabbedContent).active == "checks", what="pane 1")
        await pilot.press("7")
        await wait_until(pilot, lambda: app.focused is pane, what="the sampler to take the focus again")
        await pilot.press("pagedown")
        await wait_until(pilot, lambda: pane.scroll_y > 0, what="page down")
