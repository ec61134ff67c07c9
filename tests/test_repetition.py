"""Repetition metrics separate degenerate samples from ordinary prose."""

from __future__ import annotations

import pytest

from minigpt.repetition import distinct_n, looping_tail, repetition_rate, repetition_report

PROSE = (
    "It was a bright cold day in April, and the clocks were striking thirteen. Winston Smith, "
    "his chin nuzzled into his breast in an effort to escape the vile wind, slipped quickly "
    "through the glass doors of Victory Mansions, though not quickly enough to prevent a swirl "
    "of gritty dust from entering along with him."
)
DEGENERATE = ["the the the the", "= = = = =", "the " * 30]


@pytest.mark.parametrize("bad", DEGENERATE)
def test_distinct_n_scores_word_loops_far_below_prose(bad):
    for n in (1, 2):
        assert distinct_n(PROSE, n) - distinct_n(bad, n) >= 0.4


@pytest.mark.parametrize("bad", DEGENERATE + ["=" * 40, "ab" * 20])
def test_repetition_rate_scores_loops_far_above_prose(bad):
    assert repetition_rate(bad) - repetition_rate(PROSE) >= 0.4


def test_exact_values_on_small_strings():
    assert distinct_n("the the the the", 1) == 0.25
    assert distinct_n("a b c", 4) == 1.0  # too short to repeat
    assert repetition_rate("abc") == 0.0
    assert repetition_rate("aaaaa", n=1) == 0.8


def test_looping_tail_finds_the_period():
    assert looping_tail("the the the the") == (4, 15)
    assert looping_tail("= = = = =") == (2, 9)
    assert looping_tail("abababab") == (2, 8)
    assert looping_tail(PROSE) == (0, 0)
    period, length = looping_tail(PROSE + " and on and on and on")
    assert period == 7 and length >= 14


def test_report_flags_a_looping_tail_only_on_the_loop():
    good, bad = repetition_report(PROSE), repetition_report(PROSE + " the" * 20)
    assert good["tail_period"] == 0 and good["tail_fraction"] == 0.0
    assert bad["tail_period"] == 4 and bad["tail_length"] >= 80
    assert set(good) >= {"distinct_1", "distinct_2", "distinct_3", "distinct_4", "repetition_rate"}
    assert bad["repetition_rate"] > good["repetition_rate"]


def test_invalid_n_raises():
    with pytest.raises(ValueError):
        distinct_n(PROSE, 0)
