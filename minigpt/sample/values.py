"""Where the sampler's numbers and the seed work, and what their limits mean: one table for every
entry point that takes them (CLI flags, the UI's sampler fields, config files and checkpoints),
read by the validators of `minigpt.sample.settings` and `minigpt.train.config` (the seed's range is
the generators' that sampling and training both seed). The numbers of `train` and `check` are in
`minigpt.train.option_ranges`. No torch here.

- a seed is a non-negative int64: torch's generators take at most 64 bits, and the trainer adds
  the step and the rank to it;
- a temperature in (0, GREEDY_TEMPERATURE_BELOW) divides logits past float32's largest number (a
  logit of 100 over 1e-37 is inf, and softmax of inf is NaN): its limiting meaning, greedy, is used;
- a repetition penalty outside [1e-6, 1e6] multiplies or divides logits into inf or 0 alike.
"""

from __future__ import annotations

SEED_MIN, SEED_MAX = 0, 2**63 - 1
GREEDY_TEMPERATURE_BELOW = 1e-30  # a smaller temperature > 0 is taken as 0 (greedy)
REPETITION_PENALTY_MIN, REPETITION_PENALTY_MAX = 1e-6, 1e6


def seed_problem(value: object) -> str | None:
    """Why `value` is no seed (for "seed must be ..."), or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"an integer; found {value!r}"
    if not SEED_MIN <= value <= SEED_MAX:
        return f"an integer in [{SEED_MIN}, 2**63 - 1] (a non-negative int64); found {value}"
    return None


def is_greedy(temperature: float) -> bool:
    """0, or a temperature too small to divide logits by (see GREEDY_TEMPERATURE_BELOW)."""
    return temperature < GREEDY_TEMPERATURE_BELOW
