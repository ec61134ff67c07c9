"""Perplexity as text: short whatever the loss (the digits of e**136 ran three lines at 80 columns)."""

from __future__ import annotations

import math

from minigpt.logs.perplexity import perplexity_text


def test_ordinary_perplexity_keeps_two_decimals():
    assert perplexity_text(math.log(14.1)) == "14.10"


def test_a_huge_perplexity_is_written_as_mantissa_and_exponent():
    assert perplexity_text(136.0) == "1.2e59"  # e**136 = 1.159e59
    assert len(perplexity_text(600.0)) <= 8


def test_past_exp_range_no_loss_or_a_nan_loss():
    assert perplexity_text(800.0) == "inf"
    assert perplexity_text(None) == "-"
    assert perplexity_text(float("nan")) == "-"
