"""CharTokenizer: round trips, the fingerprint definition, typed errors on bad files and input."""

from __future__ import annotations

import hashlib
import json

import pytest

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import TokenizerError, UnknownCharactersError

NON_ASCII = "naïve café — 東京 ×…"


def test_round_trip_keeps_non_ascii_text():
    tok = CharTokenizer.from_text(NON_ASCII)
    ids = tok.encode(NON_ASCII)
    assert len(ids) == len(NON_ASCII)
    assert tok.decode(ids) == NON_ASCII


def test_vocabulary_is_sorted_and_unique():
    tok = CharTokenizer.from_text("banana")
    assert tok.chars == ["a", "b", "n"]
    assert tok.vocab_size == 3


def test_fingerprint_is_sha256_of_compact_json_of_chars():
    tok = CharTokenizer.from_text(NON_ASCII)
    payload = json.dumps(tok.chars, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert tok.fingerprint == hashlib.sha256(payload).hexdigest()


def test_fingerprint_changes_with_the_vocabulary():
    assert CharTokenizer(["a", "b"]).fingerprint != CharTokenizer(["b", "a"]).fingerprint


def test_encode_unknown_chars_names_chars_and_positions():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(UnknownCharactersError) as info:
        tok.encode("abxcy x")
    assert info.value.unknown == {"x": [2, 6], "y": [4], " ": [5]}
    assert "'x' at [2, 6]" in str(info.value)
    assert "'y' at [4]" in str(info.value)


@pytest.mark.parametrize("bad", [[0, 3], [-1], [1.0]])
def test_decode_rejects_ids_outside_the_vocabulary(bad):
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(TokenizerError, match="outside the vocabulary"):
        tok.decode(bad)


def test_decode_accepts_a_tensor():
    import torch

    tok = CharTokenizer.from_text("abc")
    assert tok.decode(torch.tensor([2, 0, 1])) == "cab"


def test_save_load_round_trip(tmp_path):
    tok = CharTokenizer.from_text(NON_ASCII)
    path = tmp_path / "sub" / "tok.json"
    tok.save(path)
    loaded = CharTokenizer.from_file(path)
    assert loaded.chars == tok.chars
    assert loaded.fingerprint == tok.fingerprint
    assert loaded.path == str(path)
    assert list(tmp_path.joinpath("sub").iterdir()) == [path]  # no temp files left behind


def test_from_file_missing(tmp_path):
    with pytest.raises(TokenizerError, match="not found") as info:
        CharTokenizer.from_file(tmp_path / "nope.json")
    assert info.value.path == str(tmp_path / "nope.json")


def test_from_file_folder(tmp_path):
    with pytest.raises(TokenizerError, match="not a regular file"):
        CharTokenizer.from_file(tmp_path)


@pytest.mark.parametrize("content", [b"", b"  \n"])
def test_from_file_empty(tmp_path, content):
    path = tmp_path / "tok.json"
    path.write_bytes(content)
    with pytest.raises(TokenizerError, match="empty"):
        CharTokenizer.from_file(path)


@pytest.mark.parametrize("content", [b'{"chars": ["a", ', b"\xff\xfe not utf-8"])
def test_from_file_not_json(tmp_path, content):
    path = tmp_path / "tok.json"
    path.write_bytes(content)
    with pytest.raises(TokenizerError, match="not valid UTF-8 JSON|invalid JSON"):
        CharTokenizer.from_file(path)


@pytest.mark.parametrize("data", [{"stoi": {"a": 0}}, ["a", "b"], {"chars": "ab"}])
def test_from_file_json_without_chars_list(tmp_path, data):
    path = tmp_path / "tok.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(TokenizerError, match='"chars" list'):
        CharTokenizer.from_file(path)


def test_from_file_allows_extra_keys(tmp_path):
    path = tmp_path / "tok.json"
    path.write_text(json.dumps({"chars": ["a", "b"], "vocab_size": 2, "made_by": "someone"}), encoding="utf-8")
    assert CharTokenizer.from_file(path).chars == ["a", "b"]


@pytest.mark.parametrize("chars", [["ab", "c"], ["a", "a"], ["a", 1]])
def test_vocabulary_must_be_unique_single_characters(chars):
    with pytest.raises(TokenizerError):
        CharTokenizer(chars)
