"""A parameter measured against its peers: its gradient RMS against the median of the parameters of
its kind (matrices with matrices, vectors with vectors), and its update/weight ratio after an
optimizer step likewise. A healthy model keeps every parameter within a few orders of magnitude of
its peers; one many orders below is on a path that barely reaches the loss (a detached branch, a
saturated gate, a scale normalised away), though it is not exactly zero.

The thresholds come from `benchmarks/peer_ratios.py`, which measures the lowest ratio any
parameter of every healthy design in the zoo reaches; docs/checks.md gives the figures."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

# a gradient this far below the median of its kind is named (the healthy zoo stays far above it)
GRAD_PEER_FLOOR = 1e-5
# an update/weight ratio this far below the median of its kind is named, likewise
UPDATE_PEER_FLOOR = 1e-3
MIN_PEERS = 3  # a kind with fewer members is measured against all parameters


def kind(shape: Iterable[int]) -> str:
    """The kind a parameter is compared within: a matrix (a weight, an embedding) or a vector (a
    bias, a norm's gain, a scale or a gate)."""
    return "matrix" if len(list(shape)) >= 2 else "vector"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def _against_peers(measures: dict[str, tuple[str, float]]) -> dict[str, float]:
    """Each name's measure over the median of its kind's (of all, for a kind with few members)."""
    everyone = [m for _, m in measures.values()]
    by_kind: dict[str, list[float]] = {}
    for k, m in measures.values():
        by_kind.setdefault(k, []).append(m)
    out = {}
    for name, (k, m) in measures.items():
        peers = by_kind[k] if len(by_kind[k]) >= MIN_PEERS else everyone
        median = _median(peers)
        if median > 0:
            out[name] = m / median
    return out


def grad_peer_ratios(rows: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Each parameter's gradient RMS over the median of its kind; only parameters with a finite,
    nonzero gradient (a missing, zero or non-finite one is judged on its own)."""
    measures = {}
    for r in rows:
        g, n = r.get("grad_norm"), r.get("numel") or 0
        if g is not None and n > 0 and math.isfinite(g) and g > 0:
            measures[r["name"]] = (kind(r["shape"]), g / math.sqrt(n))
    return _against_peers(measures)


def update_peer_ratios(rows: Iterable[Mapping[str, Any]], shapes: Mapping[str, Iterable[int]]) -> dict[str, float]:
    """Each parameter's update/weight ratio over the median of its kind; parameters whose weight
    was zero (no ratio) or that did not move (judged on their own) are left out."""
    measures = {}
    for r in rows:
        ratio = r.get("ratio")
        if ratio is not None and math.isfinite(ratio) and ratio > 0:
            measures[r["name"]] = (kind(shapes.get(r["name"], ())), ratio)
    return _against_peers(measures)


def far_below(ratios: Mapping[str, float], floor: float) -> list[tuple[str, float]]:
    """The parameters below `floor` times their peers' median, lowest first."""
    return sorted(((n, r) for n, r in ratios.items() if r < floor), key=lambda nr: nr[1])
