"""nanoGPT BPE runs (uint16 train.bin/val.bin of BPE IDs with EOT after each document, no meta.pkl,
a vocabulary padded past the tokenizer) imported, checked and sampled; and the mismatches the
import refuses before writing anything."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import (  # noqa: E402
    corpus_text,
    prepare_bpe_nanogpt,
    save_nanogpt_checkpoint,
    tiktoken_from_hf,
    train_hf_bpe,
    write_char_meta,
)

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.cli import main  # noqa: E402
from minigpt.data.tokenizer_load import load_tokenizer  # noqa: E402
from minigpt.errors import DataError  # noqa: E402
from minigpt.importers import nanogpt as importer  # noqa: E402
from minigpt.importers.nanogpt import import_nanogpt  # noqa: E402

pytest.importorskip("tiktoken", reason="the tokenizers extra is not installed")
pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")

from minigpt.data.tokenizer_libs import TiktokenTokenizer  # noqa: E402

PADDED = 2048  # the tokenizer's 2001 rounded up to a multiple of 64, as nanoGPT pads 50257 to 50304


@pytest.fixture(scope="module")
def bpe_run(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("nanogpt_bpe")
    text = corpus_text(200_000)
    hf = train_hf_bpe(text, root / "tokenizer.json")
    ranks = root / "wikibpe.tiktoken"
    tok = TiktokenTokenizer(tiktoken_from_hf(hf))
    ranks.write_text(tok.ranks_text(), encoding="ascii")
    data_dir = root / "data" / "wiki_bpe"
    prepare_bpe_nanogpt(tok.encode, tok.eot_id, text, data_dir)
    save_nanogpt_checkpoint(root / "out", PADDED)
    return {"root": root, "text": text, "hf": hf, "tiktoken": ranks, "data": data_dir, "out": root / "out"}


def test_a_bpe_run_imports_with_its_tokenizer_and_its_tokenizer_checks_pass(bpe_run, tmp_path, capsys):
    ws = tmp_path / "ws"
    argv = ["import", "nanogpt", "--out-dir", str(bpe_run["out"]), "--data-dir", str(bpe_run["data"])]
    assert main([*argv, "--workspace", str(ws), "--tokenizer", str(bpe_run["tiktoken"])]) == 0
    printed = capsys.readouterr().out
    assert "tiktoken tokenizer, 2,001 tokens" in printed
    assert f"vocab_size {PADDED} pads the tokenizer's 2001 by 47 rows" in printed
    assert (ws / "tokenizer" / "wikibpe.tiktoken").is_file()  # the workspace needs nothing else
    only = ["tokenizer_fingerprint", "token_range", "token_files_tokenizer", "special_tokens", "batch_shift"]
    report = run_checks(CheckContext(CheckOptions(workspace=ws, device="cpu")), only=only).by_id()
    assert {c: r.status for c, r in report.items() if r.status is not Status.PASS} == {}, {
        c: r.summary for c, r in report.items()
    }
    assert "EOT 2000" in report["special_tokens"].summary
    assert "pads it by 47 rows" in report["tokenizer_fingerprint"].summary


def test_without_meta_pkl_the_ids_are_taken_as_gpt2_and_the_assumption_is_stated(bpe_run, tmp_path, monkeypatch):
    # GIVEN no meta.pkl and no --tokenizer; GPT-2's encoding stood in for by the test BPE (offline)
    monkeypatch.setattr(importer, "GPT2", str(bpe_run["tiktoken"]))
    monkeypatch.setattr(importer, "GPT2_VOCAB", 2001)
    summary = import_nanogpt(bpe_run["out"], bpe_run["data"], tmp_path / "ws")
    assert any("no meta.pkl" in n and "as nanoGPT's sample.py assumes" in n for n in summary.notices)
    assert summary.vocab_size == 2001 and summary.config["vocab_size"] == PADDED


def test_without_meta_pkl_a_vocabulary_smaller_than_gpt2s_is_refused_by_name(bpe_run, tmp_path):
    with pytest.raises(DataError, match="meta.pkl not found") as info:
        import_nanogpt(bpe_run["out"], bpe_run["data"], tmp_path / "ws")
    assert "smaller than GPT-2's 50257" in info.value.message


def test_a_char_meta_pkl_beside_bpe_bins_is_refused_naming_the_ids(bpe_run, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.bin", "val.bin"):
        (data / name).write_bytes((bpe_run["data"] / name).read_bytes())
    write_char_meta(bpe_run["text"], data)
    with pytest.raises(DataError, match="train.bin holds IDs up to 2,000") as info:
        import_nanogpt(bpe_run["out"], data, tmp_path / "ws")
    assert any("meta.pkl beside BPE token files" in c for c in info.value.causes)
    assert not (tmp_path / "ws" / "checkpoints").exists()  # nothing written


def test_a_bpe_tokenizer_given_for_char_bins_is_refused(bpe_run, tmp_path):
    # GIVEN a char-level nanoGPT dataset (IDs below 100) and a model with as many rows as the BPE
    import numpy as np

    data = tmp_path / "data"
    data.mkdir()
    chars = write_char_meta(bpe_run["text"], data)
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in bpe_run["text"]], dtype=np.uint16)
    ids.tofile(data / "train.bin")
    ids[-5000:].tofile(data / "val.bin")
    with pytest.raises(DataError, match="written by another tokenizer") as info:
        import_nanogpt(bpe_run["out"], data, tmp_path / "ws", tokenizer=bpe_run["hf"])
    assert any("character IDs" in c for c in info.value.causes)


def test_sample_on_a_bpe_run_streams_text_and_stops_at_eot(bpe_run, tmp_path, capsys, monkeypatch):
    ws = tmp_path / "ws"
    import_nanogpt(bpe_run["out"], bpe_run["data"], ws, tokenizer=bpe_run["hf"])
    tok = load_tokenizer(bpe_run["hf"])
    word = tok.encode(" Valkyria")
    emoji = tok.encode(" 😀")  # several byte tokens: the character is written once it is whole
    import minigpt.sample.generate as generate_module

    def fake_generate(model, ids, settings, on_token=None, **kw):
        new = []
        for token in [*word, *emoji, tok.eot_id, *word]:
            new.append(token)
            if on_token(token) is False:
                break
        return new

    monkeypatch.setattr(generate_module, "generate", fake_generate)
    assert main(["sample", "--workspace", str(ws), "--prompt", "The", "--max-new-tokens", "8", "--seed", "0"]) == 0
    out = capsys.readouterr()
    assert out.out == "The Valkyria 😀\n"
    assert "stopped at the end-of-text token 2000" in out.err
    assert "pads the tokenizer's 2001" in out.err  # the padded rows are said, and never sampled


def test_sample_of_a_padded_bpe_run_generates_only_ids_the_tokenizer_has(bpe_run, tmp_path, capsys):
    ws = tmp_path / "ws"
    import_nanogpt(bpe_run["out"], bpe_run["data"], ws, tokenizer=bpe_run["hf"])
    argv = ["sample", "--workspace", str(ws), "--prompt", "The", "--max-new-tokens", "30", "--seed", "1"]
    assert main([*argv, "--device", "cpu", "--no-stop"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The") and len(text) > 10
