"""A loss as a perplexity (e**loss): the number, and how a line of text shows it."""

from __future__ import annotations

import math


def perplexity(loss: float | None) -> float | None:
    """e**loss; inf past where exp overflows (~709), None for no loss. The one perplexity every view uses."""
    if loss is None:
        return None
    return math.exp(loss) if loss < 700 else float("inf")


def perplexity_text(loss: float | None) -> str:
    """Perplexity for a line of text: `14.10`, `1.5e59` past a million (the digits of e**136 ran
    three lines), `inf` past exp's range, `-` for no or a non-finite loss."""
    if loss is None or not math.isfinite(loss):
        return "-"
    value = perplexity(loss)
    if value is None or math.isinf(value):
        return "inf"
    if value < 1e6:
        return f"{value:.2f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"
