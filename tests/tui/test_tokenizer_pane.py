"""Pane 3: fingerprints from the checks, a live encoder that flags unknown characters."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from minigpt_tui.panes.tokenizer import TokenizerPane
from tests.waiting import eventually, wait_until

from .conftest import SIZE, rendered, wait_for_report


@pytest.mark.slow
async def test_typed_text_shows_ids_and_flags_unknown_characters(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        report = await wait_for_report(pilot, app)
        await pilot.press("3")
        pane = app.query_one(TokenizerPane)
        await wait_until(pilot, lambda: pane.tokenizer is not None, what="the tokenizer")
        app.query_one("#tok-input", Input).focus()
        await pilot.press("H", "i", "☃")

        def encoded():
            tok = pane.tokenizer
            assert pane.last_ids == [tok.stoi["H"], tok.stoi["i"]]
            assert pane.last_unknown == {"☃": [2]}
            text = rendered(pane.query_one("#tok-encoded"))
            assert " ".join(map(str, pane.last_ids)) in text and "[" not in text  # numbers, not a list repr
            assert "✗ 1 unknown character" in text and "☃ at 2" in text
            info = rendered(pane.query_one("#tok-info"))
            fingerprint = report.by_id()["tokenizer_roundtrip"].values["fingerprint"]
            assert fingerprint in info and "checkpoint fingerprint" in info
            assert str(tok.vocab_size) in info
            sample = rendered(pane.query_one("#tok-sample"))
            assert report.by_id()["decoded_sample"].values["text"][:20] in sample

        await eventually(pilot, encoded)


async def test_known_text_round_trips(workspace, make_app):
    app = make_app(workspace)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        pane = app.query_one(TokenizerPane)
        await wait_until(pilot, lambda: pane.tokenizer is not None, what="the tokenizer")
        app.query_one("#tok-input", Input).focus()
        await pilot.press("T", "h", "e", "space")

        def round_trips():
            assert pane.last_unknown == {}
            assert "✓ exact" in rendered(pane.query_one("#tok-encoded"))

        await eventually(pilot, round_trips)
