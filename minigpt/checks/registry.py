"""The ordered list of checks. Each check is a function `fn(ctx) -> CheckResult`-like dict."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

STAGES = (
    "environment",
    "files",
    "tokenizer",
    "data",
    "batches",
    "model",
    "gradients",
    "optimization",
    "training",
    "checkpoint",
    "generation",
)


@dataclass(frozen=True)
class Check:
    id: str
    stage: str
    title: str
    depends: tuple[str, ...]
    fn: Callable
    slow: bool = False


CHECKS: dict[str, Check] = {}  # insertion order = pipeline order


def check(id: str, stage: str, title: str, depends: tuple[str, ...] = (), slow: bool = False):
    assert stage in STAGES, stage

    def register(fn: Callable) -> Callable:
        for dep in depends:
            assert dep in CHECKS, f"{id} depends on {dep}, which must be registered first"
        CHECKS[id] = Check(id, stage, title, depends, fn, slow)
        return fn

    return register


def ordered_ids() -> list[str]:
    from . import catalog  # noqa: F401  (registers every check, in pipeline order)

    return list(CHECKS)
