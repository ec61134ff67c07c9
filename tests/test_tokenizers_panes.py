"""The Tokenizer, Batches and Sampler panes with a byte-level BPE (built offline): pieces token by
token, input and target aligned token by token, samples that stop at the end-of-text token."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import corpus_text, train_hf_bpe  # noqa: E402

from minigpt.data.tokenizer_load import load_tokenizer, stage_in_workspace  # noqa: E402
from minigpt.io.atomic import atomic_torch_save  # noqa: E402
from minigpt.io.workspace import Workspace  # noqa: E402
from minigpt_tui.panes import sampler_run  # noqa: E402
from minigpt_tui.panes.batches import BatchesPane  # noqa: E402
from tests.waiting import eventually, wait_until

pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")

SIZE = (80, 24)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_panes")
    return load_tokenizer(train_hf_bpe(corpus_text(200_000), root / "tokenizer.json"))


def plain(renderable, width: int = 78) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def test_a_batch_row_of_subword_pieces_is_aligned_token_by_token_and_fits_the_width(bpe):
    ids = bpe.encode(" the Valkyria Chronicles III is a tactical role @-@ playing video game")
    pieces = [bpe.token_bytes(i).decode("utf-8", "replace") for i in ids]
    inputs, targets = ids[:-1], ids[1:]
    text = plain(BatchesPane._token_row_view(inputs, targets, pieces[:-1], pieces[1:], width=60), width=200)
    lines = text.splitlines()
    assert all(len(line.rstrip()) <= 60 for line in lines)
    rows = [line for line in lines if line.startswith(("input", "target"))]
    assert len(rows) >= 4  # wrapped into groups
    # in every group the target's pieces start where the input's next piece starts
    first_input, first_target = rows[0], rows[1]
    assert first_input.split()[2] == first_target.split()[1]  # input[t+1] above... target[t] beside it
    assert "✗" not in text


def test_a_batch_row_marks_a_mismatch_in_token_mode(bpe):
    ids = bpe.encode(" the game is a role playing game")
    pieces = [bpe.token_bytes(i).decode() for i in ids]
    targets = list(ids)  # targets equal to inputs: every position wrong
    text = plain(BatchesPane._token_row_view(ids, targets, pieces, pieces, width=78))
    assert "✗" in text


def test_a_sample_stops_at_the_end_of_text_token_and_reports_tokens_per_second(bpe, monkeypatch):
    word, eot = bpe.encode(" Valkyria 😀"), bpe.eot_id
    import minigpt.sample.generate as generate_module

    def fake_generate(model, ids, settings, on_token=None, **kw):
        new = []
        for token in [*word, eot, *word]:
            new.append(token)
            if on_token(token) is False:
                break
        return new

    monkeypatch.setattr(generate_module, "generate", fake_generate)
    posted = []
    sampler_run.stream_samples(posted.append, 1, None, [0], {"A": None}, bpe, lambda: False, eot=eot)
    text = "".join(m.text for m in posted if isinstance(m, sampler_run.TextGenerated))
    report = next(m.report for m in posted if isinstance(m, sampler_run.SampleFinished))
    assert text == " Valkyria 😀"  # the emoji written once whole, nothing after EOT
    assert report["ended_at_eot"] and report["tokens"] == len(word) + 1 and report["tokens_per_s"] > 0


def make_workspace(root: Path, tok) -> Workspace:
    import torch
    from bpe_writer import documents

    ws = Workspace(root)
    ids: list[int] = []
    for doc in documents(corpus_text(120_000)):
        ids += [*tok.encode(doc), tok.eot_id]
    atomic_torch_save(torch.tensor(ids[:-2000], dtype=torch.int16), ws.ids("train"))
    atomic_torch_save(torch.tensor(ids[-2000:], dtype=torch.int16), ws.ids("val"))
    stage_in_workspace(tok, ws.tokenizer.parent).commit()
    return ws


@pytest.mark.slow
async def test_the_three_panes_work_on_a_bpe_workspace_at_80x24(bpe, tmp_path):
    from textual.widgets import Input

    from minigpt_tui.app import MiniGPTApp
    from minigpt_tui.panes.sampler import SamplerPane
    from minigpt_tui.panes.tokenizer import TokenizerPane

    ws = make_workspace(tmp_path / "ws", bpe)
    app = MiniGPTApp(ws.root, device="cpu", skip_overfit=True, checkpoint="none")
    async with app.run_test(size=SIZE) as pilot:
        assert not app.needs_setup  # a workspace whose tokenizer is tokenizer.json is a workspace
        await pilot.press("3")
        pane = app.query_one(TokenizerPane)
        await wait_until(pilot, lambda: pane.tokenizer is not None)
        app.query_one("#tok-input", Input).value = "Hello wörld 😀"

        def encoded() -> None:
            assert pane.last_ids == bpe.encode("Hello wörld 😀")
            shown = plain(pane.query_one("#tok-encoded").content)
            assert "<0xF0><0x9F><0x98><0x80>" in shown and "exact" in shown

        await eventually(pilot, encoded)

        await pilot.press("4")
        batches = app.query_one(BatchesPane)
        await wait_until(pilot, lambda: batches.drawn is not None)
        assert any(len(piece) > 1 for piece in batches.drawn.input_chars[0])

        await pilot.press("7")
        sampler = app.query_one(SamplerPane)
        await wait_until(pilot, lambda: sampler.tokenizer is not None)
        assert "tokens (hf)" in plain(sampler.query_one("#prompt-check").content)
        assert sampler.generate(("A",))
        await wait_until(pilot, lambda: sampler.columns["A"].report is not None)
        assert sampler.columns["A"].report["tokens"] >= 1


def test_an_hf_model_folder_lends_its_tokenizer_to_the_checks_and_the_app(bpe, tmp_path):
    from minigpt.checks import CheckOptions
    from minigpt_tui.app import MiniGPTApp

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "tokenizer.json").write_text(bpe.tok.to_str(), encoding="utf-8")
    options = CheckOptions(workspace=tmp_path / "ws", model_spec=f"hf:{folder}")
    assert options.resolve().tokenizer_spec == str(folder / "tokenizer.json")
    assert not MiniGPTApp(tmp_path / "ws", model_spec=f"hf:{folder}").needs_setup
    assert MiniGPTApp(tmp_path / "ws").needs_setup  # without it: nothing to open
