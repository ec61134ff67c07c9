"""Repetition metrics for generated text: degenerate samples ("the the the", "= = = =",
"aaaaaa") score clearly worse than ordinary prose.

- `distinct_n(text, n)`: distinct word n-grams / all word n-grams (Li et al., 2016), with words
  split on whitespace. 1.0 = no word n-gram repeats; "the the the the" has distinct_1 = 0.25.
  Word-level because a character model's letters and short letter groups repeat in any prose.
- `repetition_rate(text, n=4)`: share of overlapping *character* n-grams that already occurred
  earlier in the text. 0.0 = nothing repeats; a loop of any period < n tends to 1.0. Character-level
  so that loops without whitespace ("==========", "aaaa") are caught, which word metrics miss.
- `looping_tail(text)`: the period p and length of the longest suffix in which every character
  equals the one p places before it, i.e. the text ends by cycling a p-character unit. Reported
  only when the unit repeats at least twice.

Texts too short to hold an n-gram score as non-repetitive (distinct 1.0, rate 0.0).
"""

from __future__ import annotations


def _word_ngrams(text: str, n: int) -> list[tuple[str, ...]]:
    words = text.split()
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def distinct_n(text: str, n: int) -> float:
    """Distinct word n-grams / total word n-grams; 1.0 when there are fewer than n words."""
    if n < 1:
        raise ValueError(f"n must be >= 1; found {n}")
    grams = _word_ngrams(text, n)
    return len(set(grams)) / len(grams) if grams else 1.0


def repetition_rate(text: str, n: int = 4) -> float:
    """Share of character n-grams that repeat an earlier one; 0.0 when the text is shorter than n."""
    if n < 1:
        raise ValueError(f"n must be >= 1; found {n}")
    total = len(text) - n + 1
    if total <= 0:
        return 0.0
    seen: set[str] = set()
    repeats = 0
    for i in range(total):
        gram = text[i : i + n]
        repeats += gram in seen
        seen.add(gram)
    return repeats / total


def looping_tail(text: str, max_period: int = 200) -> tuple[int, int]:
    """(period, length) of the longest periodic suffix with at least two full repeats; (0, 0) if none.

    Ties go to the shortest period, so "abababab" reports period 2, not 4.
    """
    best_period, best_length = 0, 0
    for p in range(1, min(max_period, len(text) // 2) + 1):
        i = len(text) - 1
        while i >= p and text[i] == text[i - p]:
            i -= 1
        length = len(text) - 1 - i + p  # matching characters plus the first unit they repeat
        if length >= 2 * p and length > best_length:
            best_period, best_length = p, length
    return best_period, best_length


def repetition_report(text: str) -> dict:
    """All metrics for one sample, as plain Python values for the check engine and the TUI."""
    period, length = looping_tail(text)
    report: dict = {"chars": len(text), "words": len(text.split())}
    for n in range(1, 5):
        report[f"distinct_{n}"] = distinct_n(text, n)
    report["repetition_rate"] = repetition_rate(text)
    report["tail_period"] = period
    report["tail_length"] = length
    report["tail_fraction"] = length / len(text) if text else 0.0
    return report
