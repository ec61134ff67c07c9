"""The app speaks to its panes through their doors: the modules on the app's side never look inside
a pane (no query for a pane's children, no pane attribute read) and call only methods a pane class
declares itself. Read from the source, so a shortcut fails here before it spreads."""

from __future__ import annotations

import ast
from pathlib import Path

from minigpt_tui.panes.checks import ChecksPane
from minigpt_tui.panes.loss import LossPane

ROOT = Path(__file__).resolve().parents[1]
APP_SIDE = ["app.py", "disk_watch.py", "setup_flow.py", "focus.py", "quit_flow.py"]
QUERIES = {"query", "query_one", "query_exactly_one", "query_children", "get_child_by_id", "get_widget_by_id"}
TYPED = {"checks": ChecksPane, "loss": LossPane}  # Panes' typed properties


def _pane_kind(node: ast.expr) -> type | None | bool:
    """For an expression that is a pane taken from `self.panes`: its class when known (a typed
    property), None when not (a lookup by id); False when `node` is no pane at all."""
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self.panes":
        return TYPED.get(node.attr, False)
    if isinstance(node, ast.Subscript) and ast.unparse(node.value) == "self.panes":
        return None
    if isinstance(node, ast.Call) and ast.unparse(node.func) == "self.panes.get":
        return None
    return False


def reaches_into_panes(source: str) -> list[str]:
    """Each place in `source` that queries a pane's children or reads a pane other than by calling
    a method its class declares."""
    found = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        panes: dict[str, type | None] = {}  # local names bound to a pane
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                kind = _pane_kind(node.value)
                if kind is not False:
                    panes[node.targets[0].id] = kind  # type: ignore[assignment]
        called = {id(n.func) for n in ast.walk(function) if isinstance(n, ast.Call)}
        for node in ast.walk(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in QUERIES:
                receiver = ast.unparse(node.func.value)
                selector = node.args[0] if node.args else None
                by_id = isinstance(selector, ast.Constant) and "#" in str(selector.value)
                if receiver not in ("self", "tabs") or by_id:
                    found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            kind = panes.get(value.id, False) if isinstance(value, ast.Name) else _pane_kind(value)
            if kind is False:
                continue
            declared = kind is not None and node.attr in vars(kind) and not node.attr.startswith("_")
            if not (declared and id(node) in called and callable(vars(kind)[node.attr])):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(found, key=lambda place: int(place.split(":")[0].split()[1]))


def test_the_app_side_never_reaches_into_a_pane():
    for name in APP_SIDE:
        source = (ROOT / "minigpt_tui" / name).read_text(encoding="utf-8")
        assert reaches_into_panes(source) == [], name


def test_the_door_check_sees_a_query_an_attribute_and_an_undeclared_method():
    source = """
def f(self):
    self.panes["checks"].query_one("#checks-status").update("x")
    loss = self.panes.get("loss")
    if loss.controls.training:
        loss.controls.stop_training()
    self.panes.loss.toggle_training()
    self.panes.loss.refresh()
    self.query_one("#checks-status")
"""
    assert reaches_into_panes(source) == [
        "line 3: self.panes['checks'].query_one(...)",
        "line 3: self.panes['checks'].query_one",
        "line 5: loss.controls",
        "line 6: loss.controls",
        "line 8: self.panes.loss.refresh",  # a Widget's method, not the pane's own
        "line 9: self.query_one(...)",  # a pane's child by id, asked of the app
    ]
