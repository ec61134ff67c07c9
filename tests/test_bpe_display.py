"""How a BPE token is shown, the same in every view (`piece_label`): a split character's bytes as
<0xC3>, never U+FFFD, a space as ␣ even beside such bytes; the split_vocabulary check's examples, the
Tokenizer pane's pieces (wrapped between pieces, never inside one), the Sampler's next-token table
(a long piece cut with … and its probability kept at 80 columns) and the Sampler's note on a prompt
that ends in a lone space token."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))

from bpe_writer import corpus_text, documents, train_hf_bpe  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, run_checks  # noqa: E402
from minigpt.data.tokenizer import CharTokenizer  # noqa: E402
from minigpt.data.tokenizer_api import Piece  # noqa: E402
from minigpt.data.tokenizer_load import load_tokenizer, stage_in_workspace  # noqa: E402
from minigpt.io.atomic import atomic_torch_save  # noqa: E402
from minigpt.io.workspace import Workspace  # noqa: E402
from minigpt_tui.panes.sampler_prompt import prompt_check  # noqa: E402
from minigpt_tui.panes.sampler_run import token_labeller  # noqa: E402
from minigpt_tui.widgets.prob_bars import StageBars  # noqa: E402

pytest.importorskip("tokenizers", reason="the tokenizers extra is not installed")

# what StageBars gets inside the Sampler pane at 80 columns once a run makes it scroll (its scroll bar, padding off)
WIDTH_AT_80_COLUMNS = 74
BARS = "█▉▊▋▌▍▎▏"
STAGES = ("model", "repetition penalty", "temperature", "top-k", "top-p")


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_display")
    return load_tokenizer(train_hf_bpe(corpus_text(200_000), root / "tokenizer.json"))


def plain(renderable, width: int) -> str:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


# -- the one label --------------------------------------------------------------------------------


def test_a_lone_space_is_a_space_mark_and_a_split_character_its_bytes():
    assert Piece(0, b" ", 0, 1).label == "\u2423"
    assert Piece(0, b"\xc3", 0, 1).label == "<0xC3>"
    assert Piece(0, b"\xf0\x9f", 0, 2).label == "<0xF0><0x9F>"


def test_a_space_before_a_split_character_is_a_space_mark_not_its_byte():
    # GPT-2 style BPE merges a space with the first byte of the character after it (" \xe2" of " —")
    assert Piece(0, b" \xe2", 0, 2).label == "\u2423<0xE2>"
    assert Piece(0, b"a\xffb", 0, 3).label == "a<0xFF>b"


def test_every_label_of_a_byte_level_vocabulary_is_free_of_replacement_characters(bpe):
    labels = [bpe.token_label(i) for i in range(bpe.vocab_size)]
    assert not [label for label in labels if "\ufffd" in label]
    # a space merged with the first byte of the character after it (which tokens those are depends
    # on the corpus the fixture trained on): the space mark, then the byte
    for i in range(bpe.vocab_size):
        data = bpe.token_bytes(i)
        if data[:1] != b" " or len(data) < 2:
            continue
        try:
            data[1:].decode("utf-8")
        except UnicodeDecodeError as exc:
            if exc.start == 0:  # the character after the space is cut
                assert labels[i].startswith("\u2423<0x"), (data, labels[i])
    assert bpe.token_label(bpe.eot_id) == "<|endoftext|>"


def test_the_sampler_labels_a_character_vocabulary_the_same_way():
    label = token_labeller(CharTokenizer.from_text("ab c\n"))
    assert [label(i) for i in range(5)] == ["\u23ce", "\u2423", "a", "b", "c"]
    assert label(99) == "?"


# -- the split_vocabulary check -------------------------------------------------------------------


def test_split_vocabulary_examples_show_partial_byte_tokens_as_bytes_not_replacement_characters(bpe, tmp_path):
    # GIVEN a BPE workspace whose val split has split characters (é, —, 😀) that train never shows
    ws = Workspace(tmp_path / "ws")
    text = corpus_text(120_000)
    partial = {i for i in range(bpe.vocab_size) if "<0x" in bpe.token_label(i)}
    train = [i for doc in documents(text) for i in [*bpe.encode(doc), bpe.eot_id] if i not in partial]
    val = bpe.encode(" café — naïve 😀 résumé ñ über" * 40 + text[:4000])
    assert partial & set(val)
    atomic_torch_save(torch.tensor(train, dtype=torch.int32), ws.ids("train"))
    atomic_torch_save(torch.tensor(val, dtype=torch.int32), ws.ids("val"))
    stage_in_workspace(bpe, ws.tokenizer.parent).commit()
    # WHEN the check runs
    options = CheckOptions(workspace=ws.root, device="cpu", checkpoint="none")
    result = run_checks(CheckContext(options), only=["split_vocabulary"]).by_id()["split_vocabulary"]
    # THEN its examples name the tokens by their bytes, as the Tokenizer pane does
    assert "never in train" in result.summary
    assert "\ufffd" not in result.summary and "<0x" in result.summary, result.summary
    unseen = result.values["splits"]["val"]["unseen_characters"]
    assert unseen and all("\ufffd" not in u["char"] for u in unseen)
    assert {u["char"] for u in unseen} <= {bpe.token_label(i) for i in partial}


# -- the Tokenizer pane's pieces ------------------------------------------------------------------


def test_the_tokenizer_pane_wraps_pieces_between_pieces_never_inside_one(bpe):
    from minigpt_tui.panes.tokenizer import TokenizerPane

    text = "The Valkyria Chronicles III is a tactical role @-@ playing video game — café 😀 " * 3
    labels = [p.label for p in bpe.pieces(text)]
    grid = TokenizerPane()._pieces_view(bpe, text)
    lines = plain(grid, width=50).splitlines()
    rows = lines[: next(n for n, line in enumerate(lines) if line.startswith("IDs"))]
    column = rows[0].index(labels[0])  # where the grid's second column starts
    shown = [row[column:].rstrip() for row in rows]
    assert len(shown) > 2
    assert "".join(shown) == "".join(labels)
    # every line starts at a piece's start: no piece cut in two
    starts, at = set(), 0
    for label in labels:
        starts.add(at)
        at += len(label)
    at = 0
    for line in shown:
        assert at in starts, (line, shown)
        at += len(line)


# -- the Sampler's next-token table ---------------------------------------------------------------


def _stages(top: list[tuple[str, float]]) -> list[dict]:
    return [{"name": name, "survivors": 2000 - 10 * n, "top": top} for n, name in enumerate(STAGES)]


def test_the_next_token_table_keeps_a_long_pieces_probability_at_80_columns():
    # GIVEN five stages whose most likely token is <|endoftext|>
    top = [("<|endoftext|>", 0.42), ("\u2423the", 0.2), ("<0xE2>", 0.1), ("\u2423", 0.05), (",", 0.01)]
    bars = StageBars()
    bars.show(_stages(top), "next token after the prompt")
    # WHEN it is drawn as wide as the Sampler gives it at 80 columns
    lines = bars.plain(WIDTH_AT_80_COLUMNS).splitlines()
    first = next(line for line in lines if "<|" in line)
    # THEN each stage shows the piece, whole or cut with …, and its probability
    assert all(len(line.rstrip()) <= WIDTH_AT_80_COLUMNS for line in lines)
    assert first.count(".42") == len(STAGES), first
    assert first.count("<|endoftext|>") == len(STAGES) or first.count("<|") == first.count("…") == len(STAGES)


def test_the_next_token_table_columns_stay_put_whatever_the_pieces_width():
    top = [("<|endoftext|>", 0.42), ("\u2423the", 0.2), ("a", 0.1), ("\u2423<0xE2>", 0.05)]
    bars = StageBars()
    bars.show(_stages(top), "next token after the prompt")
    rows = [line for line in bars.plain(WIDTH_AT_80_COLUMNS).splitlines() if set(line) & set(BARS)]
    bar_at = [[i for i, c in enumerate(row) if c in BARS and (i == 0 or row[i - 1] == " ")] for row in rows]
    assert len(rows) == len(top)
    assert all(starts[: len(STAGES)] == bar_at[0][: len(STAGES)] for starts in bar_at), rows


def test_a_character_tokenizers_table_stays_as_narrow_as_its_characters():
    bars = StageBars()
    bars.show(_stages([("e", 0.5), ("\u2423", 0.25)]), widest=1)
    assert "\ne  █▌  .50 e  █▌  .50 " in bars.plain(WIDTH_AT_80_COLUMNS)  # a character, a space, the bar


# -- the Sampler's prompt -------------------------------------------------------------------------


def test_a_prompt_ending_in_a_lone_space_token_gets_a_note(bpe):
    assert bpe.token_bytes(bpe.encode("The ")[-1]) == b" "  # the default prompt's last token
    note = prompt_check("The ", None, bpe, {}).plain
    assert "tokens (hf)" in note and "lone \u2423 token" in note
    assert len(note) <= WIDTH_AT_80_COLUMNS  # one line at 80 columns
    assert "lone" not in prompt_check("The", None, bpe, {}).plain
    assert "lone" not in prompt_check("The ", list("The "), CharTokenizer.from_text("The "), {}).plain
