"""Repetition and degeneracy measures for generated text, word-level and character-level.

A character model's broken output often has no spaces to split on ("ppp m)))ppU)pmpp)p))"), so
word measures alone pass it. `assess_repetition` judges a sample on measures that work on
characters; `repetition_report` returns every measure as plain values for the check engine and
the TUI's sampler pane.

Word and loop measures (keys of `repetition_report`):

- `distinct_n(text, n)`: distinct word n-grams / all word n-grams (Li et al., 2016), words split
  on whitespace. 1.0 = no word n-gram repeats; "the the the the" has distinct_1 = 0.25.
- `repetition_rate(text, n=4)`: share of overlapping character n-grams that already occurred
  earlier in the text (1 - distinct character 4-grams / all of them). 0.0 = nothing repeats; a
  loop of any period < n tends to 1.0. It falls with length on real text too (WikiText windows:
  median 0.11 at 200 characters, 0.29 at 1000), so the verdict does not threshold it.
- `looping_tail(text)`: the period p and length of the longest suffix in which every character
  equals the one p places before it, i.e. the text ends by cycling a p-character unit. Reported
  only when the unit repeats at least twice.

Character measures (`assess_repetition`; extra keys of `repetition_report`):

- `tail_fraction`: the looping tail's share of the text (reported, not judged).
- `tail_loop_share`: the same when the tail's unit repeats at least `MIN_LOOP_REPEATS` (3) times,
  else 0. Real text repeats a line twice (a table border under a table row), rarely three times.
- `longest_repeat_share`: length of the longest substring that occurs twice (overlaps allowed) /
  length. A loop anywhere scores about its share of the text; prose repeats phrases ("of the ").
- `top3_share`: share of the text taken by its three most frequent characters, counted after
  collapsing each run of one character to a single one ("-----" -> "-", "    " -> " "), so
  table borders and indentation in real text count once. English is about 0.36 (space, e, t).
- `char_entropy`: Shannon entropy of the characters (bits per character) on the same collapsed
  text. Prose is about 4.3; an untrained model draws near-uniformly from ~100 characters (6+).
- `whitespace_share`: share of whitespace characters (raw text).
- `word_bigram_distinct`: `distinct_n(text, 2)` from 10 words (`MIN_WORDS`) up, else 1.0: catches
  loops that vary ("the cat the dog the cat a cow ...") which leave no exact long repeat.
- `compression_ratio`: zlib (level 9) bytes / UTF-8 bytes. Loops compress to a few percent;
  so do long tables, and short texts barely compress, so it only warns.
- `run_share`: share of characters equal to the one before them. Reported, not judged: indented
  code and table borders score up to 0.85 in real text.

Thresholds (`THRESHOLDS`: warn / fail) sit above the worst real windows of WikiText-2 and the demo
corpus and below the garbage of models trained badly; docs/repetition.md gives each one's
calibration, the false alarms left and the known gaps.

Texts under `MIN_CHARS` (40) characters pass as "too short to judge". Texts too short to hold
an n-gram score as non-repetitive (distinct 1.0, rate 0.0).
"""

from __future__ import annotations

import math
import re
import zlib
from collections import Counter
from dataclasses import dataclass

MIN_CHARS = 40  # shorter samples pass unjudged
MIN_WORDS = 10  # word_bigram_distinct is judged from this many words
MIN_LOOP_REPEATS = 3  # a looping tail counts as a loop from this many units (real text repeats a line twice)

_RUNS = re.compile(r"(.)\1+", re.DOTALL)


@dataclass(frozen=True)
class Threshold:
    measure: str  # key in the measures dict
    above: bool  # True: values at or above a limit are bad; False: values below it
    warn: float | None  # limit for "warn" (None = never warns)
    fail: float | None  # limit for "fail" (None = never fails)
    meaning: str  # what crossing it says about the text
    real: str  # what real text scores, for the reason sentence

    def crossed(self, value: float, limit: float) -> bool:
        return value >= limit if self.above else value < limit


THRESHOLDS = (
    # "real": what real text scores (200-character windows of WikiText-2 and the demo corpus)
    Threshold("tail_loop_share", True, 0.25, 0.4, "the text ends in a loop", "real text: 0 in 99% of windows"),
    Threshold("longest_repeat_share", True, 0.35, 0.5, "a long stretch of the text repeats", "real text: under 0.3"),
    Threshold("top3_share", True, 0.55, 0.7, "three characters make up most of the text", "English: about 0.36"),
    Threshold(
        "char_entropy", True, 5.5, None, "the characters look drawn at random, not language", "real text: 3-5.2 bits"
    ),
    Threshold("whitespace_share", True, 0.8, None, "the text is mostly whitespace", "real text: under 0.75"),
    Threshold(
        "word_bigram_distinct", False, 0.4, 0.25, "the same word pairs keep coming back", "real text: above 0.75"
    ),
    Threshold("compression_ratio", False, 0.15, None, "the text compresses like a loop", "prose: 0.5-0.8"),
)


@dataclass(frozen=True)
class RepetitionVerdict:
    status: str  # "pass", "warn" or "fail"
    reasons: list[str]  # one sentence per limit crossed, fails first; or why the text was not judged
    measures: dict[str, float]  # the character measures (see the module docstring)


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
    # every n-gram after the first occurrence of its kind is a repeat
    return (total - len({text[i : i + n] for i in range(total)})) / total


def looping_tail(text: str, max_period: int = 200) -> tuple[int, int]:
    """(period, length) of the longest periodic suffix with at least two full repeats; (0, 0) if none.

    Ties go to the shortest period, so "abababab" reports period 2, not 4.
    """
    n = len(text)
    best_period, best_length = 0, 0
    for p in range(1, min(max_period, n // 2) + 1):
        if best_length == n:
            break  # the whole text loops: no longer tail exists, and ties go to the shorter period
        # k = matching characters, the longest k with text[n-k:] == text[n-k-p:n-p]. It must reach p
        # (two full units) and beat the best so far; matching is monotone in k, so test the least
        # useful k once, then bisect
        lo, hi = max(p, best_length - p + 1), n - p
        if lo > hi or text[n - lo :] != text[n - lo - p : n - p]:
            continue
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if text[n - mid :] == text[n - mid - p : n - p]:
                lo = mid
            else:
                hi = mid - 1
        length = lo + p  # matching characters plus the first unit they repeat
        if length > best_length:
            best_period, best_length = p, length
    return best_period, best_length


def _first_repeat(text: str, length: int) -> tuple[int, int] | None:
    """The first (i, j), i < j, with equal substrings of `length` at i and j; scans j upward."""
    seen: dict[str, int] = {}
    for j in range(len(text) - length + 1):
        i = seen.setdefault(text[j : j + length], j)
        if i != j:
            return i, j
    return None


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of a and b, by slice comparisons (C speed, no per-char loop)."""
    n = min(len(a), len(b))
    lo, step = 0, 8
    while step < n and a[:step] == b[:step]:  # most prefixes are short: double first
        lo, step = step, step * 2
    hi = min(step, n)
    if a[:hi] == b[:hi]:
        return hi
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_repeat(text: str) -> int:
    """Length of the longest substring occurring at least twice in `text` (overlaps allowed).

    Find the first repeat one longer than the best so far and extend it as far as it matches: a
    loop is measured whole in one step, prose in a few (about 1 ms for 1000 characters).
    """
    best = 0
    while best + 1 < len(text):
        pair = _first_repeat(text, best + 1)
        if pair is None:
            break
        i, j = pair
        # the first pair found cannot extend backwards: (i-1, j-1) would have been found first
        best += 1 + _common_prefix(text[i + best + 1 :], text[j + best + 1 :])
    return best


def collapse_runs(text: str) -> str:
    """Each run of one repeated character reduced to a single one: "a----b   c" -> "a-b c"."""
    return _RUNS.sub(r"\1", text)


def char_entropy(text: str) -> float:
    """Shannon entropy of the character distribution, in bits per character; 0.0 for ''."""
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values()) if n else 0.0


def top_chars(text: str, k: int = 3) -> tuple[list[str], float]:
    """The k most frequent characters and the share of `text` they make up."""
    common = Counter(text).most_common(k)
    return [c for c, _ in common], (sum(n for _, n in common) / len(text) if text else 0.0)


def compression_ratio(text: str) -> float:
    """zlib (level 9) compressed size / UTF-8 size; 1.0 for ''. Short texts can exceed 1."""
    data = text.encode("utf-8")
    return len(zlib.compress(data, 9)) / len(data) if data else 1.0


def _char_measures(text: str, tail: tuple[int, int]) -> dict[str, float]:
    n = max(len(text), 1)  # the empty text scores 0 everywhere (compression 1.0)
    period, length = tail
    collapsed = collapse_runs(text)
    return {
        "tail_fraction": length / n,
        "tail_loop_share": length / n if period and length >= MIN_LOOP_REPEATS * period else 0.0,
        "longest_repeat_share": longest_repeat(text) / n,
        "top3_share": top_chars(collapsed)[1],
        "char_entropy": char_entropy(collapsed),
        "whitespace_share": sum(c.isspace() for c in text) / n,
        "word_bigram_distinct": distinct_n(text, 2) if len(text.split()) >= MIN_WORDS else 1.0,
        "compression_ratio": compression_ratio(text),
        "run_share": (len(text) - len(collapsed)) / n,
    }


def _reason(t: Threshold, value: float, limit: float, text: str, tail: tuple[int, int]) -> str:
    detail = ""
    if t.measure == "top3_share":
        detail = ": " + " ".join(repr(c) for c in top_chars(collapse_runs(text))[0])
    elif t.measure == "tail_loop_share":
        period, length = tail
        detail = f": {text[len(text) - period :]!r} x {length // period}"
    return f"{t.measure} {value:.2f} {'>=' if t.above else '<'} {limit:g}, {t.meaning}{detail} ({t.real})"


def assess_repetition(text: str) -> RepetitionVerdict:
    """Judge one generated sample: "fail" for loops and near-constant output, "warn" for suspect
    output (noise, mostly whitespace, borderline loops), "pass" otherwise or when too short."""
    tail = looping_tail(text)
    measures = _char_measures(text, tail)
    if len(text) < MIN_CHARS:
        return RepetitionVerdict("pass", [f"too short to judge: {len(text)} chars < {MIN_CHARS}"], measures)
    fails, warns = [], []
    for t in THRESHOLDS:
        value = measures[t.measure]
        if t.fail is not None and t.crossed(value, t.fail):
            fails.append(_reason(t, value, t.fail, text, tail))
        elif t.warn is not None and t.crossed(value, t.warn):
            warns.append(_reason(t, value, t.warn, text, tail))
    status = "fail" if fails else "warn" if warns else "pass"
    return RepetitionVerdict(status, fails + warns, measures)


def repetition_report(text: str) -> dict:
    """All metrics for one sample, as plain Python values for the check engine and the TUI."""
    period, length = looping_tail(text)
    report: dict = {"chars": len(text), "words": len(text.split())}
    for n in range(1, 5):
        report[f"distinct_{n}"] = distinct_n(text, n)
    report["repetition_rate"] = repetition_rate(text)
    report["tail_period"] = period
    report["tail_length"] = length
    report.update(_char_measures(text, (period, length)))  # includes tail_fraction
    return report
