"""The header line: it always fits the header's title area, keeping what matters most whole."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from minigpt.checks import FAULTS
from minigpt_tui.header import HEADER_MARGIN, header_subtitle
from minigpt_tui.widgets.blank import BlankHeader

TITLE = "minigpt-tui"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_with_any_fault_the_fault_and_the_checkpoint_stay_whole_at_80_columns(fault):
    text = header_subtitle(80, TITLE, fault, "ckpt step 200 09:06", "cpu (auto)", "/root/.cache/minigpt-tui/demo")
    assert len(f"{TITLE} — {text}") <= 80 - HEADER_MARGIN  # Textual would cut it with an ellipsis
    assert text.startswith(f"FAULT {fault} · ckpt step 200 09:06")
    assert not text.endswith("…")


def test_the_device_gives_way_before_the_checkpoint():
    root = "/root/.cache/minigpt-tui/demo"
    assert header_subtitle(80, TITLE, "no_shift", "ckpt step 200 09:06", "cpu (auto)", root).endswith("· cpu")
    long_fault = "x" * 18  # as long as the longest fault's name
    assert header_subtitle(80, TITLE, long_fault, "ckpt step 200 09:06", "cpu (auto)", root) == (
        f"FAULT {long_fault} · ckpt step 200 09:06"
    )
    # no room for all of it: the checkpoint's words are cut, the fault's name never
    cut = header_subtitle(80, TITLE, long_fault, "ckpt step 250 moved away · r re-checks", "cpu", root)
    assert cut.startswith(f"FAULT {long_fault} · ckpt step") and cut.endswith("…")
    assert len(f"{TITLE} — {cut}") == 80 - HEADER_MARGIN


async def test_the_header_title_area_is_the_width_less_the_margin():
    class HeaderOnly(App):
        def compose(self) -> ComposeResult:
            yield BlankHeader()

    app = HeaderOnly()
    async with app.run_test(size=(80, 24)):
        title = app.query_one(BlankHeader).query_one("HeaderTitle")
        assert title.region.width == 80 - HEADER_MARGIN
