"""One row of a per-parameter gradient table: what the gradients check, the trainer's
`logs/grads.jsonl` and the watch write, and the gradients pane reads. Plain JSON-able values, no
torch (the UI reads it before torch is imported)."""

from __future__ import annotations

from typing import TypedDict


class GradRow(TypedDict):
    name: str
    shape: list[int]
    numel: int
    grad_norm: float | None  # None: the parameter got no gradient
    weight_norm: float
    flags: list[str]  # "frozen", "no_grad", "nonfinite", "zero"
    tied_with: list[str]
