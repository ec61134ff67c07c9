"""The checks, in pipeline order: what each is called, which stage it belongs to, what it depends on.

A check is a function `fn(ctx, run)` in one of CHECK_MODULES, declared with `@check(...)`. That
decorator is the single place a check's metadata is written. The metadata is read two ways:

- `catalog()` reads the decorators' literal arguments from the module sources with `ast`, without
  importing them: the check modules import torch, and the CLI's `--help`, the fault menu and the
  UI's palette must not wait for torch to list the checks.
- `implementations()` imports the modules (which registers every function) and verifies that what
  registered is exactly what the catalog says.

Adding a check: write its function with `@check(...)` in the module of its stage, plus its test.
"""

from __future__ import annotations

import ast
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt.errors import ConfigError, MiniGPTError

STAGES = (
    "environment",
    "files",
    "tokenizer",
    "data",
    "batches",
    "model",
    "gradients",
    "optimization",
    "loop",
    "training",
    "checkpoint",
    "generation",
)
# pipeline order: the modules in this order, each module's checks in file order
CHECK_MODULES = (
    "environment_checks",
    "vocabulary_checks",
    "data_checks",
    "tokenizer_checks",
    "batch_checks",
    "model_checks",
    "independence_checks",
    "invariant_checks",
    "gradient_checks",
    "nonfinite_checks",
    "lr_probe_checks",
    "loop_checks",
    "loop_schedule_checks",
    "loop_data_checks",
    "loop_optimizer_checks",
    "training_checks",
    "generation_checks",
)


# a check's summary and its values (a dict, or one of checks/values.py's typed dicts); any status
# other than pass is raised as an Outcome
CheckReturn = tuple[str, Mapping[str, Any]]


class RegistryError(MiniGPTError):
    """A check declaration is inconsistent (unknown stage, a dependency declared later, a duplicate id)."""


@dataclass(frozen=True)
class CheckInfo:
    """A check's metadata: plain values, no torch."""

    id: str
    stage: str
    title: str
    depends: tuple[str, ...] = ()
    slow: bool = False
    module: str = ""


@dataclass(frozen=True)
class Check(CheckInfo):
    fn: Callable = lambda ctx, run: None  # fn(ctx, run) -> (summary, values); raises Outcome for any other status


_REGISTERED: dict[str, Check] = {}


# check id -> what to say when the check is skipped because a check it needs did not pass, for a
# check the user asked for by name or flag (a generic "skipped: X skip" gives them nothing to act on)
BLOCKED_REASONS: dict[str, Callable[[Any, list[str]], str | None]] = {}


def when_blocked(check_id: str) -> Callable:
    """Register `fn(ctx, blocked_ids) -> summary or None` as `check_id`'s words when its
    dependencies block it; None keeps the engine's generic line."""

    def register(fn: Callable[[Any, list[str]], str | None]) -> Callable:
        BLOCKED_REASONS[check_id] = fn
        return fn

    return register


def check(id: str, stage: str, title: str, depends: tuple[str, ...] = (), slow: bool = False) -> Callable:
    """Declare a check. Arguments must be literals: `catalog()` reads them without importing the module."""

    def register(fn: Callable) -> Callable:
        module = fn.__module__.rsplit(".", 1)[-1]
        _REGISTERED[id] = Check(id, stage, title, tuple(depends), slow, module, fn)
        return fn

    return register


def _validate(infos: list[CheckInfo]) -> dict[str, CheckInfo]:
    out: dict[str, CheckInfo] = {}
    for info in infos:
        if info.stage not in STAGES:
            raise RegistryError(f"check {info.id}: unknown stage {info.stage!r}; stages are {', '.join(STAGES)}")
        if info.id in out:
            raise RegistryError(f"check {info.id} is declared twice ({out[info.id].module} and {info.module})")
        for dep in info.depends:
            if dep not in out:
                raise RegistryError(f"check {info.id} depends on {dep}, which must be declared before it")
        out[info.id] = info
    return out


def _literal(node: ast.expr, where: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise RegistryError(f"{where}: @check arguments must be literals (the catalog reads them unimported)") from None


def _declared_in(module: str) -> list[CheckInfo]:
    path = Path(__file__).with_name(f"{module}.py")
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    infos = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for deco in node.decorator_list:
            if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == "check":
                where = f"{path.name}:{deco.lineno}"
                args = [_literal(a, where) for a in deco.args]
                kwargs = {k.arg: _literal(k.value, where) for k in deco.keywords if k.arg}
                names = ("id", "stage", "title", "depends", "slow")
                fields = dict(zip(names, args), **kwargs)
                fields["depends"] = tuple(fields.get("depends", ()))
                infos.append(CheckInfo(module=module, **fields))
    return infos


@functools.cache
def catalog() -> dict[str, CheckInfo]:
    """Every check's metadata in pipeline order, read without importing torch (a few ms)."""
    return _validate([info for module in CHECK_MODULES for info in _declared_in(module)])


def ordered_ids() -> list[str]:
    return list(catalog())


def resolve_selection(only: list[str] | None = None, skip: list[str] | None = None) -> tuple[list[str], set[str]]:
    """The ids to run in pipeline order (dependencies of `only` pulled in) and those skipped by request."""
    checks = catalog()
    order = ordered_ids()
    unknown = [i for i in (only or []) + (skip or []) if i not in checks]
    if unknown:
        raise ConfigError(f"unknown check id(s): {', '.join(unknown)}; known: {', '.join(order)}")
    wanted = set(order)
    if only:
        wanted = set()
        stack = list(only)
        while stack:
            cid = stack.pop()
            if cid not in wanted:
                wanted.add(cid)
                stack.extend(checks[cid].depends)
    return [i for i in order if i in wanted], set(skip or [])


@functools.cache
def implementations() -> dict[str, Check]:
    """The runnable checks, in pipeline order (imports the check modules, and with them torch)."""
    for module in CHECK_MODULES:
        importlib.import_module(f"{__package__}.{module}")
    declared = catalog()
    if set(_REGISTERED) != set(declared):
        raise RegistryError(
            f"registered checks differ from the catalog: only registered {sorted(set(_REGISTERED) - set(declared))}, "
            f"only declared {sorted(set(declared) - set(_REGISTERED))}"
        )
    for cid, info in declared.items():
        got = _REGISTERED[cid]
        if CheckInfo(got.id, got.stage, got.title, got.depends, got.slow, got.module) != info:
            raise RegistryError(f"check {cid}: its registered metadata differs from its declaration")
    return {cid: _REGISTERED[cid] for cid in declared}
