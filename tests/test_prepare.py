"""`prepare`: vocabulary over all splits, encoded files, overwrite protection, CLI."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minigpt.cli import prepare as cli_prepare
from minigpt.data.corpus import load_source
from minigpt.data.prepare import encode_to_tensor, prepare_workspace
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import DataError, UnknownCharactersError
from minigpt.io.workspace import SPLITS, Workspace

WIKITEXT2 = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2"


def make_wikitext(folder: Path, train: str, valid: str, test: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for part, text in (("train", train), ("valid", valid), ("test", test)):
        (folder / f"wiki.{part}.tokens").write_text(text, encoding="utf-8")
    return folder


def load_ids(ws: Workspace, split: str) -> torch.Tensor:
    return torch.load(ws.ids(split), weights_only=True)


def test_demo_prepare_writes_tokenizer_and_uint8_splits(tmp_path):
    ws = Workspace(tmp_path)
    summary = prepare_workspace("demo", ws)
    assert all(path.is_file() for path in [ws.tokenizer, *(ws.ids(split) for split in SPLITS)])
    assert summary.vocab_size < 256 and summary.ids_dtype == "torch.uint8"
    for split in SPLITS:
        ids = load_ids(ws, split)
        assert ids.dtype == torch.uint8 and ids.dim() == 1
        assert ids.numel() == summary.tokens[split] > 0
    assert CharTokenizer.from_file(ws.tokenizer).fingerprint == summary.fingerprint


def test_demo_train_ids_decode_back_to_the_exact_train_text(tmp_path):
    ws = Workspace(tmp_path)
    prepare_workspace("demo", ws)
    tokenizer = CharTokenizer.from_file(ws.tokenizer)
    splits = load_source("demo").splits
    for split in SPLITS:
        assert tokenizer.decode(load_ids(ws, split)) == splits[split]


def test_vocabulary_covers_characters_only_in_val_and_test(tmp_path):
    src = make_wikitext(tmp_path / "wt", "plain train text\n", "a # tail\n", "5 × 3 …\n")
    summary = prepare_workspace(src, tmp_path / "ws")
    tokenizer = CharTokenizer.from_file(Workspace(tmp_path / "ws").tokenizer)
    for ch in "#×…":
        assert ch in tokenizer.stoi
    assert summary.chars_beyond_train == sorted("#35×…")
    assert "all three splits" in summary.policies["vocabulary"]


@pytest.mark.skipif(not WIKITEXT2.is_dir(), reason=f"WikiText-2 not present at {WIKITEXT2}")
def test_real_wikitext2_vocab_includes_val_test_only_chars(tmp_path):
    summary = prepare_workspace(WIKITEXT2, tmp_path)
    assert summary.source_kind == "wikitext"
    assert "×" in summary.chars_beyond_train and "…" in summary.chars_beyond_train
    tokenizer = CharTokenizer.from_file(Workspace(tmp_path).tokenizer)
    val_text = (WIKITEXT2 / "wiki.valid.tokens").read_text(encoding="utf-8")
    assert summary.tokens["val"] == len(val_text)
    assert tokenizer.decode(load_ids(Workspace(tmp_path), "val")) == val_text


def test_refuses_to_replace_a_different_tokenizer_without_force(tmp_path):
    ws = Workspace(tmp_path / "ws")
    prepare_workspace(make_wikitext(tmp_path / "a", "abc\n", "abc\n", "abc\n"), ws)
    before = ws.tokenizer.read_bytes()
    with pytest.raises(DataError, match="invalidates every checkpoint") as info:
        prepare_workspace(make_wikitext(tmp_path / "b", "xyz\n", "xyz\n", "xyz\n"), ws)
    assert "--force" in str(info.value)
    assert ws.tokenizer.read_bytes() == before
    assert CharTokenizer.from_file(ws.tokenizer).decode(load_ids(ws, "train")) == "abc\n"


def test_force_replaces_a_different_tokenizer(tmp_path):
    ws = Workspace(tmp_path / "ws")
    first = prepare_workspace(make_wikitext(tmp_path / "a", "abc\n", "abc\n", "abc\n"), ws)
    summary = prepare_workspace(make_wikitext(tmp_path / "b", "xyz\n", "xyz\n", "xyz\n"), ws, force=True)
    assert summary.replaced_tokenizer == first.fingerprint
    assert CharTokenizer.from_file(ws.tokenizer).decode(load_ids(ws, "train")) == "xyz\n"


def test_same_vocabulary_rewrites_ids_without_force(tmp_path):
    ws = Workspace(tmp_path / "ws")
    prepare_workspace(make_wikitext(tmp_path / "a", "abc\n", "abc\n", "abc\n"), ws)
    summary = prepare_workspace(make_wikitext(tmp_path / "b", "cab\n", "bca\n", "abc\n"), ws)
    assert summary.tokenizer_unchanged
    assert CharTokenizer.from_file(ws.tokenizer).decode(load_ids(ws, "train")) == "cab\n"


def test_encode_to_tensor_matches_encode_and_rejects_unknown_chars():
    tokenizer = CharTokenizer.from_text("héllo wörld →\n")
    text = "wörld → héllo\n"
    assert encode_to_tensor(tokenizer, text).tolist() == tokenizer.encode(text)
    assert encode_to_tensor(tokenizer, "").shape == (0,)
    with pytest.raises(UnknownCharactersError, match="'z'"):
        encode_to_tensor(tokenizer, "hello z")
    with pytest.raises(UnknownCharactersError):
        encode_to_tensor(tokenizer, "hello \U0001f600")  # code point above the whole vocabulary


def test_progress_callback_reaches_one(tmp_path):
    seen: list[tuple[str, float]] = []
    prepare_workspace("demo", tmp_path, progress=lambda stage, f: seen.append((stage, f)))
    fractions = [f for _, f in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_summary_is_json_ready_with_policies(tmp_path):
    data = json.loads(json.dumps(prepare_workspace("demo", tmp_path).to_dict()))
    assert set(data["policies"]) == {"vocabulary", "decoding", "split", "overwrite"}
    assert data["source_kind"] == "demo"


def test_cli_prepare_demo_prints_vocab_counts_and_paths(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", default=".")
    cli_prepare.add_arguments(parser)
    assert cli_prepare.run(parser.parse_args(["--workspace", str(tmp_path), "--source", "demo"])) == 0
    out = capsys.readouterr().out
    summary_vocab = CharTokenizer.from_file(Workspace(tmp_path).tokenizer).vocab_size
    assert f"vocabulary  {summary_vocab} characters" in out
    assert "train_ids" in out and "train " in out
    assert Workspace(tmp_path).ids("test").is_file()


def test_main_exits_2_when_refusing_to_replace_tokenizer(tmp_path, capsys):
    from minigpt.cli import main

    try:
        from minigpt.cli import build_parser

        build_parser()
    except ModuleNotFoundError as exc:
        pytest.skip(f"another subcommand module is not written yet: {exc}")
    assert main(["prepare", "--workspace", str(tmp_path), "--source", "demo"]) == 0
    other = tmp_path / "other.txt"
    other.write_text("zz\nyy\nxx\n", encoding="utf-8")
    assert main(["prepare", "--workspace", str(tmp_path), "--source", str(other)]) == 2
    assert "invalidates every checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_library_modules_do_not_import_rich_or_textual():
    code = (
        "import sys, minigpt.data.corpus, minigpt.data.prepare, minigpt.cli.prepare; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'textual')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],
    ).stdout
    assert out.strip() == "[]"
