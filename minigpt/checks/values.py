"""The typed values of the checks whose numbers other views read (the gradients pane, the JSON
report): one definition both sides import, so a renamed key fails in the type checker, not in
front of a user. Plain JSON-able values only; no torch."""

from __future__ import annotations

from typing import TypedDict

from minigpt.model.grad_row import GradRow


class GradientsValues(TypedDict):
    global_norm: float
    parameters: int
    missing_gradients: list[str]
    nonfinite_gradients: list[str]
    zero_gradients: list[str]
    notes: list[str]
    model: str  # which model was measured, e.g. "fresh model (debug shape)"
    table: list[GradRow]
    # parameters whose gradient is far below their kind's median (peers.py), with what replacing them
    # did to the loss (relative change; None where not probed)
    far_below_peers: list[PeerRow]
    lowest_to_peers: tuple[str, float] | None  # the parameter lowest against its peers, and how low


class PeerRow(TypedDict):
    name: str
    grad_to_peers: float
    loss_change_when_replaced: float | None


class UpdateRow(TypedDict):
    name: str
    update_norm: float
    weight_norm: float
    ratio: float | None  # update / weight norm; None for an all-zero weight


class OptimizerValues(TypedDict):
    learning_rate: float
    learning_rate_source: str  # in words: the run's peak and where it was read, or the check's own
    median_update_ratio: float
    max_update_ratio: float | None
    max_ratio_parameter: str | None
    unchanged: list[str]
    update_size: float
    table: list[UpdateRow]
    notes: list[str]
    # parameters whose update/weight ratio is far below their kind's median (peers.py)
    far_below_peers: list[UpdatePeerRow]
    lowest_to_peers: tuple[str, float] | None  # the parameter lowest against its peers, and how low


class UpdatePeerRow(TypedDict):
    name: str
    update_to_peers: float
