"""SVG snapshots of each pane inside the real tab bar at 80x24 and 120x40, fed fixed content
(no clocks, no durations, no real threads doing torch work). Pinned: they break on every
Textual upgrade, so other versions skip."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.widgets import Input, Static, TabbedContent

from minigpt.data.tokenizer import CharTokenizer
from minigpt_tui.app import MiniGPTApp
from minigpt_tui.messages import CheckFinished, ChecksFinished, ChecksStarted, GradientsMeasured
from minigpt_tui.screens.help import HelpScreen
from minigpt_tui.widgets.settings_grid import SettingsGrid
from minigpt_tui.workbench import PANES, Workbench
from tests.waiting import wait_until

from ._pane_harness import only_on_the_pinned_textual

pytestmark = only_on_the_pinned_textual()

CSS = Path(__file__).resolve().parents[2] / "minigpt_tui" / "app.tcss"
SIZES = [(80, 24), (120, 40)]
TEXT = "The quick brown fox jumps over the lazy dog.\n  Pack my box with five dozen liquor jugs! 0123456789"
TOKENIZER = CharTokenizer(sorted(set(TEXT)))


class FakeRows:
    def __init__(self, rows):
        self.rows = rows

    def tolist(self):
        return self.rows


class FakeContext:
    """What the tokenizer and batches panes ask of the session's check context."""

    fault_name = None
    tokenizer = TOKENIZER

    def base_config(self) -> dict:
        return {"block_size": 32}

    def batch(self, batch_size: int, block: int, seed: int = 0, split: str = "train"):
        ids = TOKENIZER.encode(TEXT * 3)
        xs = [ids[i * 5 : i * 5 + block] for i in range(4)]
        ys = [ids[i * 5 + 1 : i * 5 + block + 1] for i in range(4)]
        return FakeRows(xs), FakeRows(ys)


class FakeSession:
    context = FakeContext()
    options = None


class PaneHost(App):
    """The real tab bar (so the labels must fit) with one real pane; the others are placeholders."""

    CSS_PATH = CSS

    def __init__(self, pane_id: str, make_pane, workspace=None, active: str | None = None) -> None:
        super().__init__()
        self.pane_id, self.pane, self.active = pane_id, make_pane(), active or pane_id
        self.workspace, self.session, self.device_name = workspace, FakeSession(), "cpu"
        self.metrics_path = None

    def compose(self) -> ComposeResult:
        yield Workbench({pid: self.pane if pid == self.pane_id else Static(pid) for pid, _ in PANES})

    def on_mount(self) -> None:
        self.query_one(TabbedContent).active = self.active


def _results():
    from minigpt.checks import CheckResult, Status

    return [
        CheckResult(
            "environment",
            "environment",
            Status.PASS,
            "Python 3.11, torch 2.x, device cpu",
            values={"python": "3.11.7", "torch": "2.13.0+cpu", "cuda_available": False, "cuda_version": None},
        ),
        CheckResult(
            "files",
            "files",
            Status.FAIL,
            "1 required file missing",
            values={
                "files": [
                    {
                        "role": "tokenizer",
                        "path": "/home/someone/experiments/2026/wikitext-long-run/tokenizer/char_tokenizer.json",
                        "status": "ok",
                        "size": "1.2 KiB",
                        "required": True,
                    },
                    {
                        "role": "checkpoint",
                        "path": "/home/someone/experiments/2026/wikitext-long-run/checkpoints/mini_gpt_best.pt",
                        "status": "missing",
                        "size": None,
                        "required": True,
                    },
                    {
                        "role": "metrics",
                        "path": "/home/someone/experiments/2026/wikitext-long-run/logs/metrics.jsonl",
                        "status": "absent",
                        "size": None,
                        "required": False,
                    },
                ]
            },
        ),
        CheckResult(
            "tokenizer_roundtrip",
            "tokenizer",
            Status.PASS,
            "round trip exact on sample text",
            values={"vocab_size": TOKENIZER.vocab_size, "fingerprint": "10b63bc585ba", "first_chars": ["'\\n'", "' '"]},
        ),
        CheckResult(
            "decoded_sample", "data", Status.PASS, "300 IDs from position 0 decode to text", values={"text": TEXT}
        ),
        CheckResult(
            "batch_shift", "batches", Status.PASS, "inputs[:, 1:] == targets[:, :-1]", values={"shape": [8, 32]}
        ),
        CheckResult(
            "gradients",
            "gradients",
            Status.FAIL,
            "1 parameter frozen (requires_grad=False): blocks.1.attn.qkv.weight",
            values={"global_norm": 2.616, "model": "fresh model (debug shape)", "table": _grad_rows()},
            causes=["a layer frozen by mistake (requires_grad=False)"],
            fixes=["unfreeze it, or exclude it from the optimizer on purpose"],
        ),
    ]


def _grad_rows() -> list[dict]:
    rows = [
        {
            "name": "token_embedding.weight",
            "shape": [103, 64],
            "numel": 6592,
            "grad_norm": 0.82,
            "weight_norm": 2.83,
            "tied_with": ["lm_head.weight"],
            "flags": [],
        }
    ]
    for b in range(2):
        for part, shape, g in (("attn.qkv.weight", [192, 64], 0.19), ("mlp.fc.weight", [256, 64], 0.18)):
            frozen = b == 1 and part.startswith("attn")
            rows.append(
                {
                    "name": f"blocks.{b}.{part}",
                    "shape": shape,
                    "numel": shape[0] * shape[1],
                    "grad_norm": None if frozen else g / (b + 1),
                    "weight_norm": 2.4,
                    "tied_with": [],
                    "flags": ["frozen"] if frozen else [],
                }
            )
    return rows


def _feed(pane) -> None:
    from minigpt.checks import Report

    results = _results()
    pane.post_message(ChecksStarted([r.id for r in results], None))
    for i, r in enumerate(results):
        pane.post_message(CheckFinished(r, i, len(results)))
    pane.post_message(ChecksFinished(Report(results=results, seconds=1.0)))


def _checks():
    from minigpt_tui.panes.checks import ChecksPane

    return ChecksPane()


def _device():
    from minigpt_tui.panes.device_files import DeviceFilesPane

    from .test_device_files_pane import FakeSampler

    class Pane(DeviceFilesPane):
        make_sampler = FakeSampler

    return Pane()


def _gradients():
    from minigpt_tui.panes.gradients import GradientsPane

    return GradientsPane()


def _tokenizer():
    from minigpt_tui.panes.tokenizer import TokenizerPane

    return TokenizerPane()


def _batches():
    from minigpt_tui.panes.batches import BatchesPane

    return BatchesPane()


def _sampler():
    from minigpt_tui.panes.sampler import SamplerPane

    return SamplerPane()


@pytest.mark.parametrize("size", SIZES)
def test_checks_pane_in_tabs(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        _feed(pane)
        await wait_until(pilot, lambda: pane.report is not None, what="the fed report")
        pane.table.focus()
        await wait_until(pilot, lambda: pilot.app.focused is pane.table, what="the table's focus")

    assert snap_compare(PaneHost("checks", _checks), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_device_pane(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        _feed(pane)
        await wait_until(pilot, lambda: pane.samples >= 1)

    assert snap_compare(PaneHost("device", _device), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_gradients_pane_training_source(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        rows = [dict(r, grad_norm=(r["grad_norm"] or 0.0) * 2) for r in _grad_rows()]
        pane.post_message(GradientsMeasured(rows, global_norm=1.06, clip=1.0, source="training step 200 (grads.jsonl)"))
        _feed(pane)
        await wait_until(pilot, lambda: None not in pane.sources.values(), what="both sources")

    assert snap_compare(PaneHost("gradients", _gradients), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_gradients_pane_check_source_filtered(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        _feed(pane)
        await wait_until(pilot, lambda: pane.sources["check"] is not None, what="the check's source")
        pane.query_one("#grad-table").focus()
        await pilot.press("slash", "b", "l", "o", "c", "k", "s", "enter")

    assert snap_compare(PaneHost("gradients", _gradients), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_tokenizer_pane(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        _feed(pane)
        await wait_until(pilot, lambda: pane.tokenizer is not None)
        pane.query_one("#tok-input", Input).value = "The 日☃ fox"
        await wait_until(pilot, lambda: pane.last_ids and pane.roundtrip is not None, what="the text encoded")

    assert snap_compare(PaneHost("tokenizer", _tokenizer), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_batches_pane(snap_compare, size):
    async def fed(pilot):
        pane = pilot.app.pane
        await wait_until(pilot, lambda: pane.drawn is not None)
        _feed(pane)
        await wait_until(pilot, lambda: pane.shift_check is not None, what="batch_shift's verdict")

    assert snap_compare(PaneHost("batches", _batches), terminal_size=size, run_before=fed)


@pytest.mark.parametrize("size", SIZES)
def test_sampler_pane(snap_compare, size, demo_ws):
    async def fed(pilot):
        pane = pilot.app.pane
        await wait_until(pilot, lambda: pane.chars is not None)
        pane.query_one("#prompt", Input).value = "日本😀 The\u2603"
        grid = pane.query_one(SettingsGrid)
        grid.set_text("A", "repetition_penalty", "2.0")
        grid.set_text("B", "top_p", "2")
        grid.focus()  # the cursor on the first cell
        await wait_until(
            pilot,
            lambda: "top_p" in pane.columns["B"].errors and pilot.app.focused is grid,
            what="B's top_p marked invalid and the grid focused",
        )

    assert snap_compare(PaneHost("sampler", _sampler, demo_ws), terminal_size=size, run_before=fed)


class HelpHost(App):
    """`?` over the seven real panes (fed nothing) with the app's own keys: what the help lists."""

    CSS_PATH = CSS
    BINDINGS = MiniGPTApp.BINDINGS

    def __init__(self) -> None:
        super().__init__()
        self.workspace, self.session, self.device_name = None, FakeSession(), "cpu"
        self.metrics_path = None

    def compose(self) -> ComposeResult:
        from minigpt_tui.panes.loss import LossPane

        makers = {
            "checks": _checks,
            "device": _device,
            "tokenizer": _tokenizer,
            "batches": _batches,
            "gradients": _gradients,
            "loss": LossPane,
            "sampler": _sampler,
        }
        self.panes = {pid: makers[pid]() for pid, _ in PANES}
        yield Workbench(self.panes)


@pytest.mark.parametrize("size", SIZES)
def test_help_screen_lists_the_app_and_pane_keys(snap_compare, size):
    async def opened(pilot):
        app = pilot.app
        await wait_until(pilot, lambda: all(pane.is_mounted for pane in app.panes.values()))
        app.push_screen(HelpScreen(PANES))
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen))

    assert snap_compare(HelpHost(), terminal_size=size, run_before=opened)
