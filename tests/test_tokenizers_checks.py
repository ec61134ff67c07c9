"""The tokenizer checks on workspaces of real BPE token files (built offline): each mismatch fails
the check that exists for it, and names the cause; the right tokenizer passes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import corpus_text, documents, tiktoken_from_hf, train_hf_bpe, train_sentencepiece  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.data.tokenizer import CharTokenizer  # noqa: E402
from minigpt.data.tokenizer_load import load_tokenizer, stage_in_workspace  # noqa: E402
from minigpt.io.atomic import atomic_torch_save  # noqa: E402
from minigpt.io.workspace import Workspace  # noqa: E402

pytest.importorskip("tiktoken", reason="the tokenizers extra is not installed")
pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")
pytest.importorskip("sentencepiece", reason="the tokenizers extra is not installed")

from minigpt.data.tokenizer_libs import TiktokenTokenizer  # noqa: E402

TOKENIZER_CHECKS = ("tokenizer_roundtrip", "token_files_tokenizer", "special_tokens")


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("bpe")
    text = corpus_text(200_000)
    hf = train_hf_bpe(text, root / "tokenizer.json")
    ranks = root / "wikibpe.tiktoken"
    ranks.write_text(TiktokenTokenizer(tiktoken_from_hf(hf)).ranks_text(), encoding="ascii")
    sp = train_sentencepiece(text, root / "sp.model")
    char = root / "char_tokenizer.json"
    CharTokenizer.from_text(text).save(char)
    return {"text": text, "hf": hf, "tiktoken": ranks, "sentencepiece": sp, "char": char}


def make_workspace(root: Path, tok, text: str, *, eot: bool = True, bos_twice: bool = False) -> Workspace:
    """A workspace of `tok`'s IDs: each document encoded, EOT after it (nanoGPT's openwebtext
    prepare.py), and BOS twice before it where asked."""
    ws = Workspace(root)
    ids: list[int] = []
    for doc in documents(text):
        if bos_twice:
            ids += [tok.bos_id, tok.bos_id]
        ids += tok.encode(doc)
        if eot and tok.eot_id is not None:
            ids.append(tok.eot_id)
    cut = int(len(ids) * 0.9)
    atomic_torch_save(torch.tensor(ids[:cut], dtype=torch.int32), ws.ids("train"))
    atomic_torch_save(torch.tensor(ids[cut:], dtype=torch.int32), ws.ids("val"))
    stage_in_workspace(tok, ws.tokenizer.parent).commit()
    return ws


def run(ws: Workspace, only=TOKENIZER_CHECKS, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("checkpoint", "none")
    return run_checks(CheckContext(CheckOptions(workspace=ws.root, **kw)), only=list(only)).by_id()


def failed(results) -> set[str]:
    return {cid for cid, r in results.items() if r.status in (Status.FAIL, Status.ERROR)}


@pytest.mark.parametrize("kind", ["hf", "tiktoken", "sentencepiece", "char"])
def test_the_tokenizer_that_wrote_the_files_passes_every_tokenizer_check(built, kind, tmp_path):
    tok = load_tokenizer(built[kind])
    ws = make_workspace(tmp_path / "ws", tok, built["text"])
    results = run(ws)
    assert not failed(results), {c: r.summary for c, r in results.items()}
    assert results["token_files_tokenizer"].status is Status.PASS
    assert results["token_files_tokenizer"].values["this"]["stability"] > 0.95


def test_sentencepiece_normalisation_is_shown_not_failed(built, tmp_path):
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["sentencepiece"]), built["text"])
    roundtrip = run(ws, ["tokenizer_roundtrip"])["tokenizer_roundtrip"]
    assert roundtrip.status is Status.PASS
    assert roundtrip.values["normalised"] and "normalises text" in roundtrip.summary
    assert "->" in roundtrip.summary  # what changed, shown


def test_a_char_tokenizer_beside_bpe_token_files_fails_naming_the_ids_beyond_it(built, tmp_path):
    # GIVEN BPE token files, and the corpus's char vocabulary given as --tokenizer (a char meta.pkl's)
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["hf"]), built["text"])
    results = run(ws, tokenizer=built["char"])
    check = results["token_files_tokenizer"]
    assert check.status is Status.FAIL
    assert "written by another tokenizer" in check.summary and "beyond its" in check.summary
    assert any("workspace's own" in c and "tokenizer.json" in c for c in check.causes)  # which fits better
    assert failed(results) == {"token_files_tokenizer"}


def test_a_bpe_tokenizer_given_for_char_token_files_fails_naming_character_ids(built, tmp_path):
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["char"]), built["text"])
    results = run(ws, tokenizer=built["tiktoken"])
    check = results["token_files_tokenizer"]
    assert check.status is Status.FAIL
    assert "written by another tokenizer" in check.summary and "all IDs are below" in check.summary
    assert any("character IDs" in c for c in check.causes)
    assert failed(results) == {"token_files_tokenizer"}


def test_ids_of_another_subword_tokenizer_fail_on_reencoding(built, tmp_path):
    # GIVEN SentencePiece IDs read with a byte-level BPE that has every one of them
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["sentencepiece"]), built["text"])
    results = run(ws, tokenizer=built["hf"])
    check = results["token_files_tokenizer"]
    assert check.status is Status.FAIL and "come back" in check.summary
    assert check.values["workspace_tokenizer"]["stability"] > 0.9  # the one that wrote them
    assert failed(results) == {"token_files_tokenizer"}


def test_special_tokens_warns_when_no_document_ends_with_eot(built, tmp_path):
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["tiktoken"]), built["text"], eot=False)
    results = run(ws)
    check = results["special_tokens"]
    assert check.status is Status.WARN and "no end-of-text token" in check.summary
    assert failed(results) == set()


def test_special_tokens_fails_on_a_doubled_bos(built, tmp_path):
    ws = make_workspace(tmp_path / "ws", load_tokenizer(built["sentencepiece"]), built["text"], bos_twice=True)
    results = run(ws)
    check = results["special_tokens"]
    assert check.status is Status.FAIL and "BOS doubled" in check.summary
    assert failed(results) == {"special_tokens"}


def test_special_tokens_fails_on_added_tokens_beyond_the_embedding_rows(built, tmp_path):
    # GIVEN a model config with one row fewer than the tokenizer: its <|endoftext|> has no row
    tok = load_tokenizer(built["hf"])
    ws = make_workspace(tmp_path / "ws", tok, built["text"])
    config = tmp_path / "config.json"
    config.write_text(
        f'{{"vocab_size": {tok.vocab_size - 1}, "block_size": 32, "embedding_dim": 32, "num_heads": 2, '
        '"num_layers": 1, "dropout": 0.0}'
    )
    results = run(ws, config_path=config)
    check = results["special_tokens"]
    assert check.status is Status.FAIL and "<|endoftext|>" in check.summary and "embedding rows" in check.summary
    assert failed(results) == {"special_tokens"}
