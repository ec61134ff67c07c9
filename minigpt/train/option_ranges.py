"""Where each numeric option works, and what its ends mean: one table for the numbers a user types
into `minigpt train` and `minigpt check` (and `minigpt-tui`'s check flags), read both by the flags'
parsers and by the settings objects that also come from files (`TrainConfig` from a checkpoint,
`CheckOptions`). The sampler's ranges live in `minigpt.sample.values`, with its validator; the
seed's range is taken from there, so sampling and training agree on it. No torch here.

At the ends of the types:
- NaN is never a value; infinity only where the table says what it means;
- an integer stops at int64's largest: torch and numpy hold no more, and a step count or a size past
  it would fail inside them (`Overflow when unpacking long long`) instead of here;
- a float that must be positive starts at float32's smallest normal number: the weights are
  float32, so a learning rate or a clip norm below it underflows to 0 and the option would
  silently do nothing;
- the step counts of the checks stop at CHECK_STEPS_MAX: the overfit check keeps one loss per step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from minigpt.errors import ConfigError
from minigpt.sample.values import SEED_MAX, SEED_MIN

INT64_MAX = 2**63 - 1
FLOAT32_TINY = 1.1754943508222875e-38  # float32's smallest normal number
CHECK_STEPS_MAX = 1_000_000  # steps of one check's training run (the overfit check, each lr probe run)
SHOWN_CHARS = 40  # of a refused text: a pasted megabyte is not echoed back


@dataclass(frozen=True)
class Range:
    """A closed interval [lo, hi] (ends excluded where `*_open`), with the words a refusal uses."""

    kind: str  # "int" or "float"
    lo: float
    hi: float
    words: str  # "a positive integer", "in [0, 1)": what the value must be
    lo_open: bool = False
    hi_open: bool = False
    top: str | None = None  # the words for a value past `hi`, where `words` does not name it
    least_nonzero: float = 0.0  # values in (0, least_nonzero) are refused too (0 itself means "off")

    def problem(self, value: object) -> str | None:
        """What `value` must be instead (the words after "must be"), or None when it is in range."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.words
        if self.kind == "int" and not isinstance(value, int):
            return self.words
        if math.isnan(value):
            return self.words
        if value < self.lo or (self.lo_open and value == self.lo) or 0 < value < self.least_nonzero:
            return self.words
        if value > self.hi or (self.hi_open and value == self.hi):
            return self.top or self.words
        return None


def _count(lo: int, hi: int = INT64_MAX) -> Range:
    words = {0: "an integer >= 0", 1: "a positive integer"}.get(lo, f"an integer >= {lo}")
    top = "at most 2**63 - 1 (int64's largest)" if hi == INT64_MAX else f"at most {hi:,}"
    return Range("int", lo, hi, words, top=top)


_POSITIVE_FLOAT = Range(
    "float", FLOAT32_TINY, math.inf, "a finite number >= 1.2e-38 (float32's smallest normal)", hi_open=True
)

# flag -> where it works; the `TrainConfig` / `CheckOptions` field of each is in FIELDS
RANGES: dict[str, Range] = {
    # minigpt train
    "--n-layer": _count(1),
    "--n-head": _count(1),
    "--n-embd": _count(1),
    "--block-size": _count(1),
    "--steps": _count(1),
    "--batch-size": _count(1),
    "--grad-accum": _count(1),
    "--eval-interval": _count(1),
    "--warmup-steps": _count(0),
    "--lr": _POSITIVE_FLOAT,
    "--grad-clip": Range(
        "float",
        0.0,
        math.inf,
        "0 (off) or a finite number >= 1.2e-38 (float32's smallest normal)",
        hi_open=True,
        least_nonzero=FLOAT32_TINY,
    ),
    "--dropout": Range("float", 0.0, 1.0, "in [0, 1)", hi_open=True),
    "--seed": Range("int", SEED_MIN, SEED_MAX, "an integer in [0, 2**63 - 1] (a non-negative int64)"),
    # minigpt check, minigpt-tui
    "--overfit-steps": _count(1, CHECK_STEPS_MAX),
    "--lr-probe-steps": _count(10, CHECK_STEPS_MAX),
    "--check-timeout": Range("float", 0.0, math.inf, "a number of seconds > 0 (inf: no limit)", lo_open=True),
}
# TrainConfig / CheckOptions field -> its flag (the check's --lr is the run's learning rate)
FIELDS = {
    "num_layers": "--n-layer",
    "num_heads": "--n-head",
    "embedding_dim": "--n-embd",
    "block_size": "--block-size",
    "max_steps": "--steps",
    "batch_size": "--batch-size",
    "grad_accum": "--grad-accum",
    "eval_interval": "--eval-interval",
    "warmup_steps": "--warmup-steps",
    "learning_rate": "--lr",
    "grad_clip": "--grad-clip",
    "dropout": "--dropout",
    "seed": "--seed",
    "overfit_steps": "--overfit-steps",
    "lr_probe_steps": "--lr-probe-steps",
    "run_learning_rate": "--lr",
}


def _shown(value: object) -> str:
    """The refused value as the user can read it: a text quoted (control characters escaped),
    shortened to SHOWN_CHARS; a number as Python writes it."""
    if isinstance(value, str):
        text = value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "..."
        return repr(text)
    return repr(value)


def require(flag: str, value: object) -> None:
    """Raise ConfigError naming `flag` when `value` is outside its range; None (unset) passes."""
    if value is None:
        return
    problem = RANGES[flag].problem(value)
    if problem is not None:
        raise ConfigError(f"{flag} must be {problem}; found {_shown(value)}")


def parser_for(flag: str) -> Callable[[str], int | float]:
    """An argparse `type=` for `flag`: the number typed, or ConfigError naming the flag and its range
    (argparse passes it on: the CLI prints it on one line and exits 2)."""
    wanted = RANGES[flag]

    def parse(text: str) -> int | float:
        try:
            value: int | float = int(text) if wanted.kind == "int" else float(text)
        except ValueError:  # not a number, or an integer of more digits than Python converts
            raise ConfigError(f"{flag} must be {wanted.words}; found {_shown(text)}") from None
        require(flag, value)
        return value

    parse.__name__ = wanted.kind  # argparse names the type in its own messages
    return parse
