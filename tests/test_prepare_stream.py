"""Bounded memory in `prepare`: it streams its source and stores IDs in the smallest integer dtype,
with the same results as reading everything at once. (Peak memory and time are measured in
benchmarks/run.py, not here; the metrics reader's blocks are in test_metrics.py.)"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from minigpt.data import corpus, prepare
from minigpt.data.batches import get_batch, id_dtype, load_ids
from minigpt.data.corpus import LineStarts, choose_cuts, decode_text, iter_file_text, split_text
from minigpt.data.prepare import prepare_workspace
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import DataError
from minigpt.io.workspace import SPLITS, Workspace


def english_prose(n_chars: int) -> str:
    from pydoc_data.topics import topics

    return "".join(topics[key] for key in sorted(topics))[:n_chars]


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def lines_of(chars: str, per_line: int = 40) -> str:
    return "".join(chars[i : i + per_line] + "\n" for i in range(0, len(chars), per_line))


# -- dtypes ---------------------------------------------------------------------------------


def test_id_dtype_is_the_smallest_that_holds_the_vocabulary():
    assert [id_dtype(v) for v in (1, 256, 257, 32768, 32769)] == [
        torch.uint8,
        torch.uint8,
        torch.int16,
        torch.int16,
        torch.int32,
    ]


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [
        ("", torch.uint8),
        ("".join(chr(0x4E00 + i) for i in range(300)), torch.int16),
        # above U+FFFF too: the UTF-32 path of the encoder
        ("".join(chr(0x4E00 + i) for i in range(20000)) + "".join(chr(0x20000 + i) for i in range(13000)), torch.int32),
    ],
)
def test_prepare_stores_the_smallest_dtype_and_batches_come_out_int64(tmp_path, extra, dtype):
    text = english_prose(30_000) + lines_of(extra)
    source = tmp_path / "corpus.txt"
    source.write_text(text, encoding="utf-8")
    summary = prepare_workspace(source, tmp_path / "ws")
    ws = Workspace(tmp_path / "ws")
    tok = CharTokenizer.from_file(ws.tokenizer)
    assert summary.ids_dtype == str(dtype)
    ids = {s: load_ids(ws.ids(s)) for s in SPLITS}
    assert all(t.dtype == dtype for t in ids.values())
    assert "".join(tok.decode(ids[s]) for s in SPLITS) == text
    x, y = get_batch(ids["train"], 4, 16, generator=torch.Generator().manual_seed(0))
    assert x.dtype == y.dtype == torch.long
    assert int(x.max()) < tok.vocab_size and torch.equal(x[:, 1:], y[:, :-1])


def test_old_int64_id_files_still_load_and_batch(tiny_workspace):
    ids = load_ids(tiny_workspace.ids("train"))  # the fixture writes int64, as earlier versions did
    assert ids.dtype == torch.int64
    assert get_batch(ids, 2, 8)[0].dtype == torch.long


# -- streaming the source -------------------------------------------------------------------

MIXED = "\ufeffcafé\r\nnaïve — 東京\rline three 😀\r\n\r\nend × … \U00020000\n"


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64])
def test_reading_in_pieces_equals_decoding_the_whole_file(tmp_path, chunk):
    path = tmp_path / "mixed.txt"
    path.write_bytes(MIXED.encode("utf-8"))
    pieces = list(iter_file_text(path, chunk))
    assert "".join(pieces) == decode_text(path.read_bytes()) == MIXED[1:].replace("\r\n", "\n").replace("\r", "\n")


def test_invalid_utf8_in_a_later_block_names_its_offset_in_the_file(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("ascii text then é ok\n".encode() + b"caf\xe9\n")
    with pytest.raises(DataError, match="byte offset 25") as info:
        "".join(iter_file_text(path, 5))  # the bad byte is in the 6th block
    assert "latin1.txt" in str(info.value) and "ok\\ncaf'):" in str(info.value)  # context from earlier blocks


def test_a_file_cut_mid_character_is_an_error(tmp_path):
    path = tmp_path / "cut.txt"
    path.write_bytes("abc\n東".encode()[:-1])
    with pytest.raises(DataError, match="Not UTF-8"):
        "".join(iter_file_text(path, 2))


def test_prepare_in_tiny_pieces_writes_the_same_files_as_in_one_piece(tmp_path, monkeypatch):
    text = MIXED[1:] * 3 + english_prose(5_000)
    source = tmp_path / "corpus.txt"
    source.write_text(text, encoding="utf-8")
    prepare_workspace(source, tmp_path / "one")
    monkeypatch.setattr(corpus, "CHUNK_BYTES", 7)
    summary = prepare_workspace(source, tmp_path / "many")
    assert snapshot(tmp_path / "one") == snapshot(tmp_path / "many")
    expected, _ = split_text(decode_text(source.read_bytes()))
    tok = CharTokenizer.from_file(Workspace(tmp_path / "many").tokenizer)
    for split in SPLITS:
        assert tok.decode(load_ids(Workspace(tmp_path / "many").ids(split))) == expected[split]
        assert summary.tokens[split] == len(expected[split])


def test_line_starts_seen_in_pieces_give_the_cuts_of_the_whole_text():
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(1, 80)
        newline_rate = rng.choice((0.02, 0.2, 0.6))
        text = "".join("\n" if rng.random() < newline_rate else "x" for _ in range(n))
        try:
            expected = split_text(text, source="t")
        except DataError:
            expected = None
        starts = LineStarts(n, (n * 0.90, n * 0.95))
        i = 0
        while i < n:
            k = rng.randint(1, 9)
            starts.feed(text[i : i + k])
            i += k
        try:
            c1, c2, notice = choose_cuts(n, starts.starts(), starts.count, source="t")
            got = ({"train": text[:c1], "val": text[c1:c2], "test": text[c2:]}, notice)
        except DataError:
            got = None
        assert got == expected, repr(text)


def test_tokenizer_and_ids_are_written_only_after_every_split_encoded(tmp_path, monkeypatch):
    # GIVEN a prepared workspace and a new source whose last split fails to write
    ws = Workspace(tmp_path / "ws")
    prepare_workspace("demo", ws)
    before = snapshot(ws.root)
    source = tmp_path / "other.txt"
    source.write_text("zz\nyy\nxx\nww\n", encoding="utf-8")
    real = prepare.stage_torch_save

    def fail_on_test(obj, path):
        if Path(path).name == "test_ids.pt":
            raise DataError("simulated failure while writing the test split", path=path)
        return real(obj, path)

    monkeypatch.setattr(prepare, "stage_torch_save", fail_on_test)
    # WHEN prepare --force runs
    with pytest.raises(DataError, match="simulated"):
        prepare_workspace(source, ws, force=True)
    # THEN nothing changed: no new tokenizer, no new train/val IDs, no temp files
    assert snapshot(ws.root) == before


def test_a_source_that_changes_between_passes_is_refused_and_nothing_written(tmp_path, monkeypatch):
    source = tmp_path / "growing.txt"
    source.write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    real_scan = prepare._scan

    def scan_then_grow(src, report):
        found = real_scan(src, report)
        with open(source, "a", encoding="utf-8") as fh:
            fh.write("five\n")  # another program appends after the vocabulary pass
        return found

    monkeypatch.setattr(prepare, "_scan", scan_then_grow)
    with pytest.raises(DataError, match="changed while prepare was reading it"):
        prepare_workspace(source, tmp_path / "ws")
    assert not (tmp_path / "ws").exists() or snapshot(tmp_path / "ws") == {}
