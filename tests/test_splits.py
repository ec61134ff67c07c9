"""How splits relate (`minigpt.data.splits`), mostly on the embedded corpus's own text: identical, nested,
partly copied and disjoint splits; a window that only matches across token boundaries is no hit;
the characters a held-out split has that training never shows, with their counts."""

from __future__ import annotations

import pytest
import torch

from minigpt.data.corpus import demo_text
from minigpt.data.splits import PROBES, WINDOW, overlap, unseen_characters
from minigpt.data.tokenizer import CharTokenizer


@pytest.fixture(scope="module")
def text() -> tuple[CharTokenizer, torch.Tensor]:
    chars = demo_text()
    tok = CharTokenizer.from_text(chars)
    return tok, torch.tensor(tok.encode(chars), dtype=torch.long)


def test_identical_splits_are_identical_contained_and_every_window_found(text):
    tok, ids = text
    train = ids[:20_000]
    o = overlap(train, train.clone(), tok.vocab_size, "val")
    assert o.identical and o.contained
    assert o.probes == PROBES and o.found == PROBES and o.share == 1.0


def test_a_held_out_split_cut_from_training_is_contained_and_its_hits_point_at_the_same_text(text):
    tok, ids = text
    train, held = ids[:20_000], ids[5_000:9_000]
    o = overlap(train, held, tok.vocab_size, "val")
    assert not o.identical and o.contained and o.found == o.probes
    for hit in o.examples:
        window = held[hit["offset"] : hit["offset"] + WINDOW]
        assert torch.equal(train[hit["train_offset"] : hit["train_offset"] + WINDOW], window)


def test_a_tenth_copied_into_held_out_text_is_a_tenth_of_the_windows(text):
    tok, ids = text
    # the demo text repeats its headings, so the fresh part is random IDs: never 64 in a row alike
    train = ids[:20_000]
    fresh = torch.randint(0, tok.vocab_size, (9_000,), generator=torch.Generator().manual_seed(0))
    assert overlap(train, fresh, tok.vocab_size, "val").found == 0
    held = torch.cat([fresh, train[2_000:3_000]])
    o = overlap(train, held, tok.vocab_size, "val")
    assert not o.contained
    assert 0.05 <= o.share <= 0.15, o.share


def test_bytes_that_match_only_across_token_boundaries_are_no_hit():
    # vocabulary over 256: two bytes per ID, little-endian: [0x0102, 0x0304] packs to 02 01 04 03,
    # so the ID 0x0401 (01 04) occurs in the bytes at an odd offset but is not a token of train
    train = torch.tensor([0x0102, 0x0304])
    assert not overlap(train, torch.tensor([0x0401]), 2_000, "val").contained
    assert overlap(train, torch.tensor([0x0304]), 2_000, "val").contained


def test_a_held_out_split_shorter_than_a_window_has_no_probes(text):
    tok, ids = text
    o = overlap(ids[:20_000], ids[100 : 100 + WINDOW - 1], tok.vocab_size, "test")
    assert o.contained and o.probes == 0 and o.share == 0.0


def test_unseen_characters_are_the_ids_training_never_shows_with_their_counts(text):
    tok, ids = text
    rare = [i for i in range(tok.vocab_size) if (ids == i).sum() > 0]
    held_id, train_only = rare[-1], ids[ids != rare[-1]]
    held = torch.cat([ids[:500], torch.full((7,), held_id)])
    expected = int((ids[:500] == held_id).sum()) + 7
    assert unseen_characters(train_only, held, tok.vocab_size) == {held_id: expected}
    assert unseen_characters(ids, ids[:500], tok.vocab_size) == {}
