"""No test asserts right after a fixed pause: the suite is not flaky by construction.

An assertion whose last wait before it was a fixed pause (`await pilot.pause()`, with or without
a delay, `asyncio.sleep`, `time.sleep`) checks whatever the app happened to finish in that time:
on a quiet machine it passes, on a loaded one it fails. Every such assertion waits for its condition
instead (`tests/waiting.py`). This test reads every test module's syntax tree and names each one.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Calls that wait for a condition (or drive the app and wait for it to settle): after one of these,
# an assertion is about a state the test waited for.
CONDITION_WAITS = {"wait_until", "eventually", "stays", "wait_for", "eventually_sync", "wait_for_report"}
FIXED_WAITS = {"pause", "sleep"}


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Await):
        node = node.value
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _fixed_wait(stmt: ast.stmt) -> str | None:
    """The source of a statement that is only a fixed pause or sleep, else None."""
    if isinstance(stmt, ast.Expr) and _call_name(stmt.value) in FIXED_WAITS:
        return ast.unparse(stmt.value)
    return None


def _waits(node: ast.AST) -> bool:
    """Whether evaluating `node` awaits something or waits for a condition."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Await) and _call_name(sub) not in FIXED_WAITS:
            return True
        if isinstance(sub, ast.Call) and _call_name(sub) in CONDITION_WAITS:
            return True
    return False


def _asserts(node: ast.AST) -> list[ast.Assert]:
    return [sub for sub in ast.walk(node) if isinstance(sub, ast.Assert)]


def races(source: str) -> list[tuple[int, str]]:
    """(line, the pause it follows) for each assertion whose last wait was a fixed pause."""
    found: list[tuple[int, str]] = []

    def block(stmts: list[ast.stmt], pending: str | None) -> str | None:
        for stmt in stmts:
            if (wait := _fixed_wait(stmt)) is not None:
                pending = wait
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                block(stmt.body, None)  # a new scope: it runs when called, not here
            elif isinstance(stmt, ast.Assert):
                if pending:
                    found.append((stmt.lineno, pending))
            elif isinstance(stmt, (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
                headers = [getattr(stmt, name, None) for name in ("test", "iter")]
                headers += [item.context_expr for item in getattr(stmt, "items", [])]
                if any(_waits(h) for h in headers if h is not None):
                    pending = None
                # each branch starts from the state before it; after the statement, the body's state
                after = block(stmt.body, pending)
                for name in ("orelse", "finalbody"):
                    block(getattr(stmt, name, []), pending)
                for handler in getattr(stmt, "handlers", []):
                    block(handler.body, pending)
                pending = after
            elif _waits(stmt):
                pending = None
            elif pending and _asserts(stmt):
                found.extend((a.lineno, pending) for a in _asserts(stmt))
        return pending

    block(ast.parse(source).body, None)
    return found


def test_no_assertion_in_the_suite_follows_a_fixed_pause():
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line} asserts after `{pause}`"
        for path in sorted(TESTS.rglob("*.py"))
        for line, pause in races(path.read_text(encoding="utf-8"))
    ]
    assert not offenders, "wait for the condition instead (tests/waiting.py):\n" + "\n".join(offenders)


def test_the_rule_finds_a_pause_then_an_assertion_and_passes_a_wait():
    source = textwrap.dedent(
        """
        async def test_racy(pilot, app):
            await pilot.press("x")
            await pilot.pause()
            for pane in app.panes:
                assert pane.is_mounted
            assert app.done

        async def test_waits(pilot, app):
            await pilot.pause()
            await wait_until(pilot, lambda: app.done)
            assert app.done

        def test_sleeps(proc):
            time.sleep(0.5)
            assert proc.poll() is not None
        """
    )
    assert [line for line, _ in races(source)] == [6, 7, 16]


def test_no_test_reads_the_toasts_textual_expires():
    # a notification leaves `app._notifications` after its timeout, which a loaded machine can
    # spend before the test looks: tests read `record_notifications(app)` (tests/tui/conftest.py)
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{node.lineno}"
        for path in sorted(TESTS.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr == "_notifications"
    ]
    assert not offenders, "read record_notifications(app) instead:\n" + "\n".join(offenders)
