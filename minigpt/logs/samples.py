"""Samples written while training: a short text at a fixed prompt, temperature and seed at each
evaluation, one JSON line each in `logs/samples.jsonl`, so a person (and the `sample_structure`
check) can see step 0's noise turn into words.

Written by our trainer and by the watch (`minigpt.watch(..., tokenizer=PATH)`), which draw the text
with `minigpt.sample.generate.draw_sample`; read by the check and the Loss pane.

Structure is measured against the data itself: the share of a sample's words that are words of
the training text (`word_share`), beside the same measure on the validation text (what real text
of this corpus scores), plus the repetition measures of `minigpt.sample.repetition`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from minigpt.sample.settings import SAMPLE_PROMPT, SAMPLE_SETTINGS

MAX_LINE = 1 << 16  # a longer line is no sample record: skipped, never read whole
MAX_RECORDS = 10_000  # the newest are kept past this
_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")  # letters (any script), with an inner apostrophe


@dataclass(frozen=True)
class SampleRecord:
    step: int
    text: str
    prompt: str = SAMPLE_PROMPT
    val_loss: float | None = None


def record_line(record: SampleRecord) -> str:
    data = {"step": record.step, "prompt": record.prompt, "text": record.text}
    if record.val_loss is not None and math.isfinite(record.val_loss):
        data["val_loss"] = record.val_loss
    data.update(temperature=SAMPLE_SETTINGS.temperature, seed=SAMPLE_SETTINGS.seed)
    return json.dumps(data, ensure_ascii=False) + "\n"


def read_samples(path: Path) -> list[SampleRecord]:
    """The samples in the log, by step (a resumed run's rewritten steps: the last one wins).
    Unreadable lines are skipped; a missing file is no samples."""
    by_step: dict[int, SampleRecord] = {}
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return []
    with fh:
        while True:
            raw = fh.readline(MAX_LINE + 1)
            if not raw:
                break
            if len(raw) > MAX_LINE:
                while raw and not raw.endswith(b"\n"):  # skip the rest of an over-long line
                    raw = fh.readline(MAX_LINE)
                continue
            record = _parse(raw)
            if record is not None:
                by_step[record.step] = record
                if len(by_step) > MAX_RECORDS:
                    del by_step[min(by_step)]
    return [by_step[s] for s in sorted(by_step)]


def _parse(raw: bytes) -> SampleRecord | None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    step, text = data.get("step"), data.get("text")
    if not isinstance(step, int) or isinstance(step, bool) or not isinstance(text, str):
        return None
    prompt = data["prompt"] if isinstance(data.get("prompt"), str) else ""
    val = data.get("val_loss")
    val_loss = float(val) if isinstance(val, (int, float)) and not isinstance(val, bool) else None
    return SampleRecord(step, text, prompt, val_loss)


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


@dataclass(frozen=True)
class Yardstick:
    """What structure means for one corpus: its common characters and its words."""

    common: frozenset[str]  # the most frequent characters, covering 95 % of the text
    vocabulary: frozenset[str]  # its words, lower-cased

    @classmethod
    def of(cls, text: str, coverage: float = 0.95) -> Yardstick:
        counts = Counter(text)
        total, covered, common = sum(counts.values()), 0, set()
        for ch, n in counts.most_common():
            if total and covered / total >= coverage:
                break
            common.add(ch)
            covered += n
        return cls(frozenset(common), frozenset(words(text)))

    def measure(self, text: str) -> Structure:
        """char_fit: the share of characters among the common ones; word_fit: the share of letters
        that stand in words of two or more letters the corpus has (single letters say nothing)."""
        if not text:
            return Structure(0.0, 0.0)
        found = words(text)
        letters = sum(len(w) for w in found)
        real = sum(len(w) for w in found if len(w) >= 2 and w in self.vocabulary)
        return Structure(sum(ch in self.common for ch in text) / len(text), real / letters if letters else 0.0)


@dataclass(frozen=True)
class Structure:
    char_fit: float
    word_fit: float
