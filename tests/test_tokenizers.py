"""The tokenizer interface over its four backends: char, tiktoken, Hugging Face tokenizer.json and
SentencePiece, each built offline (tests/fixtures/bpe_writer.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import corpus_text, tiktoken_from_hf, train_hf_bpe, train_sentencepiece  # noqa: E402

from minigpt.data.tokenizer import CharTokenizer  # noqa: E402
from minigpt.data.tokenizer_load import load_tokenizer, stage_in_workspace, workspace_tokenizer  # noqa: E402
from minigpt.errors import TokenizerError  # noqa: E402

pytest.importorskip("tiktoken", reason="the tokenizers extra is not installed")
pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")
pytest.importorskip("sentencepiece", reason="the tokenizers extra is not installed")

from minigpt.data.tokenizer_libs import TiktokenTokenizer  # noqa: E402

HARD = "Hello  wörld — naïve café 😀\n\n = Valkyria Chronicles III =\n\tend<|endoftext|>"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    text = corpus_text(200_000)
    hf = train_hf_bpe(text, root / "tokenizer.json")
    enc = tiktoken_from_hf(hf)
    ranks = root / "wikibpe.tiktoken"
    ranks.write_text(TiktokenTokenizer(enc).ranks_text(), encoding="ascii")
    sp = train_sentencepiece(text, root / "sp.model")
    char = root / "char_tokenizer.json"
    CharTokenizer.from_text(text).save(char)
    return {"hf": hf, "tiktoken": ranks, "sentencepiece": sp, "char": char}


@pytest.mark.parametrize("kind", ["hf", "tiktoken", "sentencepiece", "char"])
def test_each_backend_loads_by_path_with_its_kind_and_size(files, kind):
    tok = load_tokenizer(files[kind])
    assert tok.kind == kind
    assert tok.vocab_size > 50 and len(tok.fingerprint) == 64
    assert load_tokenizer(files[kind]).fingerprint == tok.fingerprint  # stable across loads


@pytest.mark.parametrize("kind", ["hf", "tiktoken"])
def test_byte_level_bpe_round_trips_any_text_and_its_pieces_cover_its_bytes(files, kind):
    tok = load_tokenizer(files[kind])
    assert tok.lossless
    ids = tok.encode(HARD)
    assert tok.decode(ids) == HARD
    pieces = tok.pieces(HARD)
    assert [p.id for p in pieces] == ids
    assert b"".join(p.data for p in pieces) == HARD.encode("utf-8")
    assert pieces[-1].special and pieces[-1].id == tok.eot_id  # the EOT written out is the EOT token
    emoji = [p for p in pieces if p.partial]
    # a split character shows its bytes (after a space mark where the piece starts with a space)
    assert emoji and all("<0x" in p.label and "\ufffd" not in p.label for p in emoji)


def test_tiktoken_and_hf_built_from_the_same_ranks_encode_alike(files):
    hf, tt = load_tokenizer(files["hf"]), load_tokenizer(files["tiktoken"])
    body = corpus_text(300_000)[200_000:260_000]
    assert hf.encode(body) == tt.encode(body)
    assert hf.eot_id == tt.eot_id == hf.vocab_size - 1


def test_sentencepiece_normalises_and_says_so(files):
    tok = load_tokenizer(files["sentencepiece"])
    assert not tok.lossless
    text = "Hello  world"
    assert tok.decode(tok.encode(text)) == "Hello world"  # SentencePiece folds the double space
    pieces = tok.pieces("a 😀")
    assert any(p.partial for p in pieces)  # byte fallback
    assert tok.eot_id is not None and tok.bos_id is not None


def test_char_tokenizer_keeps_its_interface_and_pieces_are_characters(files):
    tok = load_tokenizer(files["char"])
    assert isinstance(tok, CharTokenizer)
    assert [p.data for p in tok.pieces("The")] == [b"T", b"h", b"e"]
    assert tok.encodable("The\u2603") == "The"


def test_a_folder_or_hf_prefix_finds_the_tokenizer_beside_a_model(files, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_bytes(files["hf"].read_bytes())
    assert load_tokenizer(f"hf:{tmp_path}").kind == "hf"
    assert load_tokenizer(tmp_path).kind == "hf"
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(TokenizerError, match="no tokenizer in") as info:
        load_tokenizer(f"hf:{tmp_path}")
    assert "save_pretrained" in str(info.value)


@pytest.mark.parametrize("kind", ["hf", "tiktoken", "sentencepiece", "char"])
def test_a_tokenizer_staged_in_a_workspace_is_found_there_and_keeps_its_fingerprint(files, kind, tmp_path):
    tok = load_tokenizer(files[kind])
    folder = tmp_path / "tokenizer"
    stage_in_workspace(tok, folder).commit()
    found = workspace_tokenizer(folder / "char_tokenizer.json")
    assert load_tokenizer(found).fingerprint == tok.fingerprint


def test_a_missing_tiktoken_encoding_offline_names_the_cache_variable(tmp_path):
    # GIVEN an empty cache and no network (a proxy nothing listens on)
    env = {
        "TIKTOKEN_CACHE_DIR": str(tmp_path),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "PATH": "/usr/bin:/bin",
    }
    code = (
        "from minigpt.data.tokenizer_load import load_tokenizer\n"
        "from minigpt.errors import TokenizerError\n"
        "try:\n    load_tokenizer('tiktoken:gpt2')\n"
        "except TokenizerError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert "TIKTOKEN_CACHE_DIR=" in out.stdout and "tiktoken.get_encoding('gpt2')" in out.stdout, out.stderr


def test_an_unknown_tiktoken_name_lists_the_known_ones():
    with pytest.raises(TokenizerError, match="gpt2"):
        load_tokenizer("tiktoken:gpt-9")


def test_a_json_that_is_neither_layout_is_refused_by_name(tmp_path):
    bad = tmp_path / "vocab.json"
    bad.write_text('{"version": "1.0", "vocab": {}}')
    with pytest.raises(TokenizerError, match='no "model" object'):
        load_tokenizer(bad)


def test_loading_the_interface_imports_no_tokenizer_library():
    code = (
        "import sys\nimport minigpt.data.tokenizer_load\n"
        "print(sorted(m for m in ('tiktoken', 'tokenizers', 'sentencepiece') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
