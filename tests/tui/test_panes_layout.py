"""Layout at 80 columns: every tab label whole, long paths cut from the left, no reprs on pane 2."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.widgets import Static, Tab

from minigpt.checks import CheckResult, Status
from minigpt_tui.messages import CheckFinished
from minigpt_tui.panes.device_files import DeviceFilesPane
from minigpt_tui.widgets.humanize import human_bytes, human_float, human_seconds, shorten_left
from minigpt_tui.workbench import PANES, TAB_LABELS, Workbench
from tests.waiting import eventually, wait_until

from ._pane_harness import PaneHarness
from .conftest import rendered


class Tabs80(App):
    def compose(self) -> ComposeResult:
        yield Workbench({pid: Static(pid) for pid, _ in PANES})


async def test_every_tab_label_is_whole_at_80_columns():
    async with Tabs80().run_test(size=(80, 24)) as pilot:

        def whole() -> None:
            tabs = list(pilot.app.query(Tab))
            assert len(tabs) == len(PANES)
            for n, (tab, (pid, title)) in enumerate(zip(tabs, PANES), start=1):
                assert str(tab.label) == f"{n} {TAB_LABELS.get(pid, title)}"
                assert tab.region.right <= 80 and tab.region.width >= len(str(tab.label)), (tab.label, tab.region)

        await eventually(pilot, whole)


class NoSampling:
    def __init__(self, workspace):
        pass

    def sample(self):
        raise AssertionError("not sampled in this test")


class QuietDevicePane(DeviceFilesPane):
    make_sampler = NoSampling

    def on_show(self) -> None:  # keep the sampler asleep
        pass


async def test_device_pane_says_none_for_a_missing_cuda_and_cuts_long_paths_from_the_left(tmp_path):
    long_dir = "/home/someone/experiments/2026/a-very-long-run-name-that-goes-on/and-on"
    env = CheckResult(
        "environment",
        "environment",
        Status.PASS,
        "ok",
        values={"python": "3.11.7", "cuda_available": False, "cuda_version": None, "gpu_memory_gib": 79.64},
    )
    files = CheckResult(
        "files",
        "files",
        Status.PASS,
        "2 files found",
        values={
            "files": [
                {
                    "role": "tokenizer",
                    "path": f"{long_dir}/tokenizer/char_tokenizer.json",
                    "status": "ok",
                    "size": "1 KiB",
                },
                {
                    "role": "checkpoint",
                    "path": f"{long_dir}/checkpoints/mini_gpt_best.pt",
                    "status": "ok",
                    "size": "2 MiB",
                },
            ]
        },
    )
    async with PaneHarness(QuietDevicePane, None).run_test(size=(80, 24)) as pilot:
        pane = pilot.app.query_one(DeviceFilesPane)
        pane.post_message(CheckFinished(env, 0, 2))
        pane.post_message(CheckFinished(files, 1, 2))

        def shown() -> None:
            env_text = rendered(pane.query_one("#device-env"))
            lines = rendered(pane.query_one("#device-files")).splitlines()
            assert "none (this torch is built without CUDA)" in env_text and "None" not in env_text
            assert "79.6 GiB" in env_text and "CUDA available no" in " ".join(env_text.split())
            rows = [line for line in lines if "✓ ok" in line]
            assert len(rows) == 2  # one line each: nothing wrapped over three
            assert "  …/" in rows[0] and rows[0].rstrip().endswith("/tokenizer/char_tokenizer.json")  # cut on the left
            assert "  …/" in rows[1] and rows[1].rstrip().endswith("/checkpoints/mini_gpt_best.pt")
            assert all(len(line.rstrip()) <= 80 for line in lines)

        await eventually(pilot, shown)


def test_shorten_left_keeps_the_file_name_and_cuts_at_a_slash():
    assert shorten_left("/a/b/c/file.pt", 40) == "/a/b/c/file.pt"
    assert shorten_left("/home/me/runs/long/checkpoints/best.pt", 22) == "…/checkpoints/best.pt"
    assert len(shorten_left("/x/" + "y" * 50, 10)) == 10


def test_numbers_for_people():
    assert human_bytes(1536) == "1.5 KiB" and human_bytes(512) == "512 B" and human_bytes(140 * 2**30) == "140 GiB"
    assert human_seconds(0.21) == "210 ms" and human_seconds(75) == "1 min 15 s"
    assert human_float(2.61643705900835) == "2.616" and human_float(1e-5) == "1.000e-05"
    assert human_float(float("nan")) == "NaN" and human_float(0.0) == "0"


async def test_a_hidden_pane_renders_check_results_only_once_it_is_shown():
    from textual.widgets import TabbedContent

    from minigpt_tui.panes.tokenizer import TokenizerPane

    from .test_panes_snapshots import PaneHost, _feed

    app = PaneHost("tokenizer", TokenizerPane, active="checks")  # the tokenizer's tab is not the one shown
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.pane
        _feed(pane)
        # every result fed has been handled: a callback queued behind them ran
        handled: list[bool] = []
        pane.call_later(handled.append, True)
        await wait_until(pilot, lambda: handled, what="the results handled")
        assert pane.roundtrip is not None  # the result is kept...
        # ...but not drawn while hidden
        assert "waiting" in rendered(pane.query_one("#tok-info"))
        assert "waiting" in rendered(pane.query_one("#tok-sample"))
        app.query_one(TabbedContent).active = "tokenizer"

        def drawn() -> None:
            assert "vocab size" in rendered(pane.query_one("#tok-info"))
            assert "waiting" not in rendered(pane.query_one("#tok-sample"))

        await eventually(pilot, drawn)
