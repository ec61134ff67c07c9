"""Tokenizer files a user hands over that are broken or hostile: a `.tiktoken` with duplicate,
missing or out-of-range ranks (tiktoken panics on some: a Rust panic is a BaseException), a
`tokenizer.json` nested 200,000 deep or gigabytes large, a SentencePiece model with a piece that
is not UTF-8. Each is a TokenizerError naming the file and the cause on its first line, and the
CLI exits 2 with it; never a traceback, never a BaseException."""

from __future__ import annotations

import base64
import binascii
import json
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import corpus_text, train_hf_bpe, train_sentencepiece  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.cli import main  # noqa: E402
from minigpt.data.tokenizer_files import MAX_RANK, MAX_TOKENIZER_FILE_BYTES  # noqa: E402
from minigpt.data.tokenizer_load import load_tokenizer  # noqa: E402
from minigpt.errors import TokenizerError  # noqa: E402

tiktoken = pytest.importorskip("tiktoken", reason="the tokenizers extra is not installed")
pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")
pytest.importorskip("sentencepiece", reason="the tokenizers extra is not installed")

BYTES = [(bytes([b]), b) for b in range(256)]  # every byte-level BPE starts from these, ranks 0-255
MERGES = [(b"th", 256), (b"he", 257), (b"the", 258), (b" t", 259)]
# the special tokens a file named after a tiktoken encoding gets (minigpt.data.tokenizer_libs.KNOWN_SPECIALS)
SPECIAL_IDS = {"gpt2": {50256}, "cl100k_base": {100257, 100258, 100259, 100260, 100276}, "fuzz": set()}


def b64(token: bytes) -> str:
    return base64.b64encode(token).decode()


def write_ranks(path: Path, entries: list[tuple[bytes, int]] | list[str]) -> Path:
    """A .tiktoken file of (token, rank) entries, or of lines written as they are."""
    lines = [e if isinstance(e, str) else f"{b64(e[0])} {e[1]}" for e in entries]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return path


def first_line(exc: pytest.ExceptionInfo) -> str:
    return str(exc.value).splitlines()[0]


def rust_panic_type() -> type[BaseException]:
    """pyo3's PanicException, as tiktoken raises it on a duplicate rank (it prints the panic)."""
    try:
        tiktoken.Encoding("dup", pat_str=r"\S+", mergeable_ranks={b"a": 0, b"b": 0}, special_tokens={})
    except BaseException as exc:  # the panic is a BaseException: that is what is caught here
        if type(exc).__name__ == "PanicException":
            return type(exc)
        raise
    pytest.skip("this tiktoken does not panic on a duplicate rank")


# -- .tiktoken ranks: each fault by name --------------------------------------------------------


def test_a_duplicate_rank_is_refused_naming_both_lines_before_tiktoken_panics(tmp_path):
    path = write_ranks(tmp_path / "dup.tiktoken", [*BYTES, (b"ab", 5)])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert (
        first_line(exc)
        == f"Not a .tiktoken ranks file: {path} line 257: rank 5 repeats line 6's (each rank is one token)"
    )


def test_a_missing_single_byte_is_refused_at_load_not_when_text_holds_it(tmp_path):
    # GIVEN every byte but "a" (tiktoken loads it, then panics encoding any text with an "a")
    path = write_ranks(tmp_path / "nobyte.tiktoken", [e for e in BYTES if e[0] != b"a"] + MERGES)
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert str(path) in first_line(exc)
    assert "lacks 1 of the 256 single-byte tokens (0x61)" in first_line(exc)


@pytest.mark.parametrize(
    ("rank", "cause"),
    [
        ("-1", "rank -1 is negative"),
        (str(2**32), f"rank {2**32} is beyond 4,294,967,294"),
        (str(2**32 - 1), f"rank {2**32 - 1} is beyond"),  # tiktoken's own "no rank" mark
        (str(2**64), f"rank {2**64} is beyond"),
        ("9" * 5000, "is beyond"),  # past int()'s 4300-digit limit: still the same message
        ("+5", "the rank '+5' is not a whole number"),
        ("5_000", "not a whole number"),
        ("1e3", "not a whole number"),
    ],
)
def test_a_rank_outside_what_tiktoken_holds_is_refused_naming_its_line(tmp_path, rank, cause):
    path = write_ranks(tmp_path / "r.tiktoken", [f"{b64(t)} {r}" for t, r in BYTES] + [f"{b64(b'ab')} {rank}"])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc).startswith(f"Not a .tiktoken ranks file: {path} line 257: ")
    assert cause in first_line(exc)


def test_a_repeated_token_is_refused_naming_the_line_it_repeats(tmp_path):
    # a second rank for one token would silently replace the first, leaving a gap where rank 97 was
    path = write_ranks(tmp_path / "t.tiktoken", [*BYTES, (b"a", 300)])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc).endswith("line 257: the token b'a' repeats line 98's (each token has one rank)")


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("YW*= 300", "the token 'YW*=' is not valid base64"),
        ("YWI 300", "the token 'YWI' is not valid base64"),  # padding missing
        ("YWI= 300 7", "is not 'BASE64 RANK'"),
        ("YWI=", "is not 'BASE64 RANK'"),
    ],
)
def test_a_line_that_is_not_base64_and_a_rank_is_refused_naming_it(tmp_path, line, cause):
    path = write_ranks(tmp_path / "b.tiktoken", [f"{b64(t)} {r}" for t, r in BYTES[:2]] + [line])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc).startswith(f"Not a .tiktoken ranks file: {path} line 3: ")
    assert cause in first_line(exc)


def test_a_rank_that_is_a_special_tokens_id_in_the_named_encoding_is_refused(tmp_path):
    # GIVEN a file named gpt2.tiktoken (so <|endoftext|> is 50256) that gives 50256 to a token too
    path = write_ranks(tmp_path / "gpt2.tiktoken", [*BYTES, (b"ab", 50256)])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert "line 257: rank 50256 is the ID of <|endoftext|> in gpt2" in first_line(exc)


def test_a_non_ascii_byte_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "u.tiktoken"
    path.write_bytes(b"YQ== 0\nYg== 1\n\xc3\xa9 2\n")
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc) == f"Not a .tiktoken ranks file: {path} line 3 has a non-ASCII byte (offset 14)"


def test_ranks_with_a_gap_load_and_the_gap_shows_as_no_bytes(tmp_path):
    # GIVEN ranks that skip 300-999 (cl100k_base has such a gap before its special tokens)
    tok = load_tokenizer(write_ranks(tmp_path / "gap.tiktoken", [*BYTES, (b"ab", 1000)]))
    assert tok.vocab_size == 1002 and tok.encode("ab") == [1000]
    assert tok.token_bytes(500) == b"" and tok.token_label(500) == ""  # was a KeyError out of the sampler's table
    with pytest.raises(TokenizerError, match="ID 500 is no token"):
        tok.decode([500])


def test_a_panic_that_still_escapes_tiktoken_is_a_tokenizer_error(tmp_path, monkeypatch, capfd):
    # GIVEN a tiktoken that panics on a valid file (a future bug of the library)
    panic = rust_panic_type()
    capfd.readouterr()  # the panic printed while its type was found

    def panics(*args, **kwargs):
        raise panic("index out of bounds: the len is 3 but the index is 7")

    monkeypatch.setattr(tiktoken, "Encoding", panics)
    path = write_ranks(tmp_path / "ok.tiktoken", [*BYTES, *MERGES])
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc) == (
        f"{path}: the tiktoken library failed on this tokenizer "
        "(a panic: index out of bounds: the len is 3 but the index is 7)"
    )


def test_a_panic_in_the_tokenizers_library_is_a_tokenizer_error(tmp_path, monkeypatch):
    import tokenizers

    panic = rust_panic_type()
    hf = train_hf_bpe("the theme of the thesis " * 50, tmp_path / "tokenizer.json", vocab_size=300)

    class Panicking:
        @staticmethod
        def from_str(text):
            raise panic("called `Option::unwrap()` on a `None` value")

    monkeypatch.setattr(tokenizers, "Tokenizer", Panicking)
    with pytest.raises(TokenizerError, match=r"tokenizer.json: the tokenizers library failed on this tokenizer"):
        load_tokenizer(hf)


def test_keyboard_interrupt_passes_through_the_panic_guard(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tiktoken, "Encoding", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_tokenizer(write_ranks(tmp_path / "ok.tiktoken", [*BYTES, *MERGES]))


# -- .tiktoken ranks: any file, generated --------------------------------------------------------

FAULTS = ("dup_rank", "dup_token", "drop", "rank", "rank_text", "token_text", "fields", "blank", "swap", "special")


@st.composite
def ranks_files(draw) -> tuple[str, list[str]]:
    """(encoding name, lines): a valid byte-level ranks file with up to four faults applied."""
    name = draw(st.sampled_from(sorted(SPECIAL_IDS)))
    merges = draw(st.lists(st.binary(min_size=2, max_size=4), max_size=6, unique=True))
    merges = [m for m in merges if len(m) > 1]
    rows = [[b64(t), str(r)] for t, r in BYTES] + [[b64(m), str(256 + k)] for k, m in enumerate(merges)]
    for fault in draw(st.lists(st.sampled_from(FAULTS), max_size=4)):
        i = draw(st.integers(0, len(rows) - 1))
        j = draw(st.integers(0, len(rows) - 1))
        if len(rows[i]) != 2 or len(rows[j]) != 2:  # a blank line or one already cut: leave it be
            continue
        if fault == "dup_rank":
            rows[j][1] = rows[i][1]
        elif fault == "dup_token":
            rows[j][0] = rows[i][0]
        elif fault == "drop" and len(rows) > 1:
            del rows[i]
        elif fault == "rank":
            edge = st.sampled_from([-1, 0, 255, MAX_RANK, MAX_RANK + 1, 2**32, 2**63, 2**64])
            rows[i][1] = str(draw(edge | st.integers(-(2**70), 2**70)))
        elif fault == "rank_text":
            rows[i][1] = draw(st.text("0123456789+-_e.x ", min_size=1, max_size=6)).strip() or "-"
        elif fault == "token_text":
            rows[i][0] = draw(st.text("ABCabc019+/=*-_.", min_size=1, max_size=9))
        elif fault == "fields":
            rows[i] = rows[i][:1] if draw(st.booleans()) else [*rows[i], "7"]
        elif fault == "blank":
            rows.insert(i, [])
        elif fault == "swap":
            rows[i], rows[j] = rows[j], rows[i]
        elif fault == "special" and SPECIAL_IDS[name]:
            rows[i][1] = str(min(SPECIAL_IDS[name]))
    return name, [" ".join(row) for row in rows]


def expected_fault(name: str, lines: list[str]) -> str | None:
    """What is wrong with the file, found by a second reading of the rules (None: nothing)."""
    tokens: set[bytes] = set()
    ranks: set[int] = set()
    for line in lines:
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            return "fields"
        try:
            token = base64.b64decode(fields[0], validate=True)
        except binascii.Error:
            return "base64"
        if not (fields[1].isdigit() and len(fields[1]) < 20 and int(fields[1]) <= MAX_RANK):
            return "rank"
        rank = int(fields[1])
        if rank in SPECIAL_IDS[name] or token in tokens or rank in ranks or not token:
            return "repeat"
        tokens.add(token)
        ranks.add(rank)
    if not all(bytes([b]) in tokens for b in range(256)):
        return "bytes"
    return None


@settings(max_examples=400, deadline=None)
@given(ranks_files(), st.text(max_size=40))
def test_any_ranks_file_loads_and_round_trips_or_is_refused_by_name(file, text):
    name, lines = file
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{name}.tiktoken"
        path.write_text("\n".join(lines) + "\n", encoding="ascii")
        fault = expected_fault(name, lines)
        event(f"fault: {fault}")
        try:
            tok = load_tokenizer(path)
            ids = tok.encode(text + "<|endoftext|>" + text)
            decoded = tok.decode(ids)
            labels = [tok.token_label(i) for i in (*ids, 0, 255, tok.vocab_size - 1)]
        except TokenizerError as exc:
            assert fault is not None, f"a valid file refused: {exc}"
            assert str(path) in str(exc).splitlines()[0]
            return
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # a Rust panic is no Exception: make it a failure hypothesis can shrink
            raise AssertionError(f"{type(exc).__module__}.{type(exc).__name__}: {exc}") from None
        assert fault is None, f"a file with a {fault} fault was loaded"
        assert decoded == text + "<|endoftext|>" + text
        assert len(labels) == len(ids) + 3


# -- tokenizer.json -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hf_file(tmp_path_factory) -> Path:
    return train_hf_bpe(corpus_text(40_000), tmp_path_factory.mktemp("hf") / "tokenizer.json", vocab_size=400)


@pytest.mark.parametrize("name", ["tokenizer.json", "vocab.json"])
def test_a_tokenizer_json_nested_200000_deep_is_refused_as_the_docs_say(tmp_path, name):
    path = tmp_path / name
    path.write_text('{"model": ' + "[" * 200_000 + "]" * 200_000 + "}", encoding="utf-8")
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(path)
    assert first_line(exc) == (
        f"Not a tokenizer: {path} is too deeply nested (more than about {sys.getrecursionlimit()} levels of [ or {{): "
        "invalid JSON, so it cannot be read as a tokenizer.json"
    )


def test_a_decoder_nested_past_the_librarys_limit_is_refused_by_it_as_a_typed_error(hf_file, tmp_path):
    # GIVEN a decoder nested 300 levels deep: the json module reads it, the library (serde: 128 levels) does not
    spec = json.loads(hf_file.read_text(encoding="utf-8"))
    spec["decoder"] = None
    depth = 150  # two levels of JSON ({ and [) per Sequence
    deep = '{"type": "Sequence", "decoders": [' * depth + '{"type": "ByteLevel"}' + "]}" * depth
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec).replace('"decoder": null', f'"decoder": {deep}'), encoding="utf-8")
    with pytest.raises(TokenizerError, match="the tokenizers library refused it"):
        load_tokenizer(path)


def test_a_tokenizer_json_with_a_bom_and_one_in_utf16_are_told_apart(hf_file, tmp_path):
    bom = tmp_path / "bom" / "tokenizer.json"
    bom.parent.mkdir()
    bom.write_bytes(b"\xef\xbb\xbf" + hf_file.read_bytes())
    assert load_tokenizer(bom).vocab_size == load_tokenizer(hf_file).vocab_size
    utf16 = tmp_path / "tokenizer.json"
    utf16.write_bytes(hf_file.read_text(encoding="utf-8").encode("utf-16"))
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(utf16)
    assert first_line(exc) == f"Not a tokenizer: {utf16} is not valid UTF-8 JSON (invalid byte at offset 0)"


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("truncation", {"direction": "Right", "max_length": 5, "strategy": "LongestFirst", "stride": 0}),
        # Fixed 2**40 aborted the whole process ("memory allocation of 4398046511104 bytes failed")
        (
            "padding",
            {
                "strategy": {"Fixed": 1000},
                "direction": "Right",
                "pad_to_multiple_of": None,
                "pad_id": 0,
                "pad_type_id": 0,
                "pad_token": "!",
            },
        ),
    ],
)
def test_a_tokenizer_jsons_padding_or_truncation_never_changes_the_stream(hf_file, tmp_path, setting, value):
    spec = json.loads(hf_file.read_text(encoding="utf-8"))
    spec[setting] = value
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    text = "the valley of the river " * 20
    assert load_tokenizer(path).encode(text) == load_tokenizer(hf_file).encode(text)


def test_a_tokenizer_json_that_cannot_encode_is_a_tokenizer_error_naming_it(tmp_path):
    # GIVEN a WordPiece model without its [UNK] token: the library refuses every word with a bare Exception
    model = {
        "type": "WordPiece",
        "vocab": {"a": 0},
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
    }
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"version": "1.0", "model": model}), encoding="utf-8")
    tok = load_tokenizer(path)
    with pytest.raises(TokenizerError) as exc:
        tok.encode("hello")
    assert first_line(exc) == (
        f"{path}: the tokenizers library could not encode text: "
        "WordPiece error: Missing [UNK] token from the vocabulary"
    )


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("tokenizer.json", "tokenizer.json"),
        ("big.tiktoken", ".tiktoken ranks file"),
        ("big.model", "SentencePiece model"),
    ],
)
def test_a_file_far_larger_than_any_tokenizer_is_refused_before_it_is_read(tmp_path, name, what):
    # GIVEN a 300 MB file (sparse: it takes no disk), larger than any tokenizer by ten times
    path = tmp_path / name
    with open(path, "wb") as fh:
        fh.truncate(300_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(TokenizerError) as exc:
            load_tokenizer(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first_line(exc).startswith(f"Not a {what}: {path} is 300,000,000 bytes (286.1 MiB), far larger than")
    assert "refused before reading it (limit 256.0 MiB)" in first_line(exc)
    assert peak < 8 * 2**20  # nothing of it was read
    assert MAX_TOKENIZER_FILE_BYTES < 300_000_000


@pytest.mark.parametrize("name", ["tokenizer.json", "x.tiktoken", "x.model"])
def test_an_empty_or_git_lfs_pointer_tokenizer_is_refused_by_name(tmp_path, name):
    empty = tmp_path / name
    empty.write_bytes(b"")
    with pytest.raises(TokenizerError, match=r"is empty \(an interrupted save\?\)"):
        load_tokenizer(empty)
    lfs = tmp_path / "lfs" / name
    lfs.parent.mkdir()
    lfs.write_bytes(b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 1400000\n")
    with pytest.raises(TokenizerError, match=r"is a Git LFS pointer \(\d+ bytes\), not the file itself"):
        load_tokenizer(lfs)


# -- SentencePiece --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sp_files(tmp_path_factory) -> dict:
    """A trained SentencePiece model, and a copy with one piece's first byte made 0xFF (not UTF-8)."""
    import sentencepiece

    root = tmp_path_factory.mktemp("sp")
    good = train_sentencepiece(corpus_text(50_000), root / "sp.model", vocab_size=400)
    data = good.read_bytes()
    sp = sentencepiece.SentencePieceProcessor()
    sp.LoadFromSerializedProto(data)
    for i in range(sp.get_piece_size()):
        piece = sp.id_to_piece(i).encode("utf-8")
        if len(piece) >= 3 and piece.isalpha() and data.count(piece) == 1:
            break
    else:
        pytest.fail("no piece to corrupt")
    bad = root / "bad.model"
    bad.write_bytes(data.replace(piece, b"\xff" + piece[1:]))
    return {"good": good, "bad": bad, "id": i}


def test_a_sentencepiece_piece_that_is_not_utf8_is_refused_at_load_naming_it(sp_files):
    with pytest.raises(TokenizerError) as exc:
        load_tokenizer(sp_files["bad"])
    assert first_line(exc).startswith(
        f"Not a usable SentencePiece model: {sp_files['bad']} piece {sp_files['id']} is not UTF-8 text "
    )


def test_a_sentencepiece_model_with_text_pieces_still_decodes_and_shows_every_piece(sp_files):
    tok = load_tokenizer(sp_files["good"])
    assert tok.decode(tok.encode("the valley")) == "the valley"
    assert all(isinstance(tok.token_label(i), str) for i in range(tok.vocab_size))


# -- as a user meets them: the CLI and the checks -------------------------------------------------


@pytest.fixture
def hostile(tmp_path, sp_files) -> dict[str, Path]:
    return {
        "duplicate rank": write_ranks(tmp_path / "dup.tiktoken", [*BYTES, (b"ab", 5)]),
        "missing byte": write_ranks(tmp_path / "nobyte.tiktoken", [e for e in BYTES if e[0] != b"a"]),
        "rank past u32": write_ranks(tmp_path / "big.tiktoken", [*BYTES, (b"ab", 2**32)]),
        "nested json": _nested(tmp_path / "tokenizer.json"),
        "non-UTF-8 piece": sp_files["bad"],
    }


def _nested(path: Path) -> Path:
    path.write_text('{"model": ' + "[" * 200_000 + "]" * 200_000 + "}", encoding="utf-8")
    return path


@pytest.mark.parametrize("case", ["duplicate rank", "missing byte", "rank past u32", "nested json", "non-UTF-8 piece"])
def test_sample_with_a_hostile_tokenizer_exits_2_naming_the_file_on_one_line(hostile, case, tmp_path, capsys):
    path = hostile[case]
    code = main(["sample", "--workspace", str(tmp_path / "ws"), "--tokenizer", str(path), "--prompt", "abc"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: Not a") and str(path) in err.splitlines()[0]
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["duplicate rank", "missing byte", "nested json", "non-UTF-8 piece"])
def test_the_checks_fail_naming_a_hostile_tokenizer_and_never_hang_on_a_panic(tiny_workspace, hostile, case):
    # a tiktoken panic is a BaseException: untyped, it would pass the check runner and never finish the run
    options = CheckOptions(workspace=tiny_workspace.root, tokenizer=hostile[case], device="cpu", checkpoint="none")
    result = run_checks(CheckContext(options), only=["tokenizer_roundtrip"]).by_id()["tokenizer_roundtrip"]
    assert result.status is Status.FAIL, result.summary
    assert str(hostile[case]) in result.summary
