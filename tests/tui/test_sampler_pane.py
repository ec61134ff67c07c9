"""Pilot tests for the sampler pane (7), on a fresh (untrained) debug-size model."""

from __future__ import annotations

from textual.widgets import Input, Static

from minigpt.checks import CheckOptions
from minigpt_tui.panes.sampler import SamplerPane
from minigpt_tui.session import Session
from minigpt_tui.widgets.prob_bars import StageBars

from ._pane_harness import PaneHarness
from ._pane_harness import until as _until


def _app(ws) -> PaneHarness:
    return PaneHarness(SamplerPane, ws, session=Session(CheckOptions(workspace=ws.root, device="cpu")))


async def _set(pilot, pane, selector: str, value: str) -> None:
    pane.query_one(selector, Input).value = value
    await pilot.pause()


def _text(pane, selector: str) -> str:
    return str(pane.query_one(selector, Static).render())


async def test_invalid_temperature_shows_an_inline_message_and_does_not_generate(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        await _set(pilot, pane, "#A-temperature", "abc")
        assert "not a number" in _text(pane, "#A-temperature-error")
        assert pane.query_one("#A-temperature", Input).has_class("-invalid")
        assert pane.generate(("A",)) is False
        assert "fix the marked settings" in _text(pane, "#sampler-status")

        await _set(pilot, pane, "#A-temperature", "-1")  # parses, but validate() rejects it (in a worker)
        assert await _until(pilot, lambda: "temperature must be" in _text(pane, "#A-temperature-error"))
        assert pane.generate(("A",)) is False

        await _set(pilot, pane, "#A-temperature", "0.8")
        assert await _until(pilot, lambda: not pane.errors["A"])
        assert not pane.query_one("#A-temperature", Input).has_class("-invalid")


async def test_prompt_characters_missing_from_the_vocabulary_are_flagged(demo_ws):
    app = _app(demo_ws)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(SamplerPane)
        assert await _until(pilot, lambda: pane.chars is not None)
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
        assert await _until(pilot, lambda: pane.chars is not None)
        await _set(pilot, pane, "#A-top_k", "5")
        await _set(pilot, pane, "#A-max_new_tokens", "40")
        assert await _until(pilot, lambda: not pane.errors["A"])
        pane.query_one("#A-max_new_tokens", Input).focus()
        await pilot.press("enter")  # enter in any field generates A
        assert pane._run_id == 1
        assert await _until(pilot, lambda: pane.reports["A"] is not None, 60)
        assert len(pane.outputs["A"]) == 40
        assert pane.outputs["A"] in _text(pane, "#A-output")
        assert "repetition" in _text(pane, "#A-report") and "distinct-1" in _text(pane, "#A-report")
        survivors = {s["name"]: s["survivors"] for s in pane.stages}
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
        assert await _until(pilot, lambda: not pane.errors["A"] and not pane.errors["B"] and pane.chars is not None)
        await pilot.click("#compare")
        assert await _until(pilot, lambda: all(pane.reports[c] is not None for c in "AB"), 60)
        assert len(pane.outputs["A"]) == len(pane.outputs["B"]) == 30
        assert pane.values["B"]["seed"] == pane.values["A"]["seed"]
        first_a = pane.outputs["A"]
        assert pane.compare()  # same seed again: the same text
        assert await _until(pilot, lambda: pane.reports["A"] is not None and pane.reports["B"] is not None, 60)
        assert pane.outputs["A"] == first_a
