"""Reading and splitting corpus text: decoding policy, line-boundary splits, sources."""

from __future__ import annotations

import pytest

from minigpt.data.corpus import decode_text, demo_text, load_source, read_text, split_text
from minigpt.errors import DataError


def test_bom_at_file_start_is_stripped(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbfhello\n")
    assert read_text(path) == "hello\n"


def test_crlf_and_lone_cr_become_lf(tmp_path):
    path = tmp_path / "dos.txt"
    path.write_bytes(b"one\r\ntwo\rthree\n")
    assert read_text(path) == "one\ntwo\nthree\n"


def test_invalid_utf8_error_names_file_byte_offset_and_bytes(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf" + b"\xe9 au lait\n")
    with pytest.raises(DataError) as info:
        read_text(path)
    message = str(info.value)
    assert "latin1.txt" in message
    assert "byte offset 3" in message
    assert r"b'\xe9'" in message


def test_empty_file_is_a_data_error(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"\xef\xbb\xbf")  # only a BOM: no text
    with pytest.raises(DataError, match="Empty corpus"):
        read_text(path)


def test_missing_source_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_source(tmp_path / "nope.txt")


def test_single_file_splits_are_runs_of_whole_lines():
    lines = [f"line {i} " + "x" * (i % 17) + "\n" for i in range(500)]
    text = "".join(lines)
    splits = split_text(text)[0]
    assert splits["train"] + splits["val"] + splits["test"] == text
    for part in splits.values():
        assert part and part.endswith("\n")
        assert all(line + "\n" in lines for line in part[:-1].split("\n"))


def test_single_file_split_is_about_90_5_5_by_characters():
    text = "".join(f"{i:04d} some words on a line\n" for i in range(2000))
    sizes = {k: len(v) / len(text) for k, v in split_text(text)[0].items()}
    assert sizes["train"] == pytest.approx(0.90, abs=0.01)
    assert sizes["val"] == pytest.approx(0.05, abs=0.01)
    assert sizes["test"] == pytest.approx(0.05, abs=0.01)


def test_three_lines_give_one_line_per_split():
    assert split_text("a\nb\nc")[0] == {"train": "a\n", "val": "b\n", "test": "c"}


def test_text_with_fewer_than_three_lines_is_cut_inside_a_line_with_a_notice():
    # GIVEN an 11k-character article on 2 lines (the line-based split needs 3)
    text = "Title of the article\n" + "word " * 2200
    splits, notice = split_text(text, source="article.txt")
    assert "".join(splits.values()) == text
    assert len(splits["train"]) == round(len(text) * 0.9) and len(splits["val"]) > 500
    assert "article.txt has only 2 line(s)" in notice and "inside a line" in notice


def test_text_of_fewer_than_three_characters_cannot_be_split():
    with pytest.raises(DataError, match="2 character"):
        split_text("a\n")


def test_demo_is_deterministic_prose_of_several_hundred_kb():
    text = demo_text()
    assert text == demo_text()
    assert len(text) > 300_000
    assert "\r" not in text
    assert 'The "assert" statement' in text


def test_demo_source_splits_at_line_boundaries():
    corpus = load_source("demo")
    assert corpus.kind == "demo"
    assert "".join(corpus.splits.values()) == demo_text()
    assert corpus.splits["train"].endswith("\n") and corpus.splits["val"].endswith("\n")


def test_wikitext_raw_release_is_read_with_valid_as_val(tmp_path):
    for part in ("train", "valid", "test"):
        (tmp_path / f"wiki.{part}.raw").write_text(f" = {part} = \n", encoding="utf-8")
    corpus = load_source(tmp_path)
    assert corpus.kind == "wikitext"
    assert corpus.splits == {"train": " = train = \n", "val": " = valid = \n", "test": " = test = \n"}


def test_wikitext_folder_missing_a_split_names_what_it_found(tmp_path):
    (tmp_path / "wiki.train.tokens").write_text("x\n", encoding="utf-8")
    (tmp_path / "wiki.valid.tokens").write_text("y\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"Not a WikiText-2 folder.*found only wiki.train.tokens, wiki.valid.tokens"):
        load_source(tmp_path)


def test_decode_text_of_valid_utf8_keeps_non_ascii():
    assert decode_text("× … →\r\n".encode()) == "× … →\n"
