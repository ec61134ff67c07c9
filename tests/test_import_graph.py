"""The import graph of minigpt/ and minigpt_tui/ has no circle, counting imports inside functions
too: a circle means a name lives in the wrong module (house style: move it, do not hide the import)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def import_graph() -> dict[str, set[str]]:
    modules: dict[str, tuple[Path, bool]] = {}
    for path in [*ROOT.glob("minigpt/**/*.py"), *ROOT.glob("minigpt_tui/**/*.py")]:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, package) in modules.items():
        here = name if package else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:  # a name inside a module: the module
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if target and target != name:
                    graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_the_circle_finder_sees_a_circle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert "minigpt.logs.curve" in import_graph()["minigpt.logs.curve_rules"]  # the graph is read at all


# The floors of minigpt/, lowest first: a module imports only its own floor and those below
# (house style: UI -> engine -> pipeline -> files). The package itself (`minigpt`: the version and
# the `minigpt.watch` entry point) and `python -m minigpt` stand outside the floors.
FLOORS = [
    ("minigpt.errors", "minigpt.device", "minigpt.threads"),
    ("minigpt.io",),
    ("minigpt.data",),
    ("minigpt.model",),
    ("minigpt.sample",),
    ("minigpt.logs",),
    ("minigpt.train",),
    ("minigpt.importers",),
    ("minigpt.loopwatch",),
    ("minigpt.checks",),
    ("minigpt.cli",),
    # the UI: small widgets, then the app's services (messages, the session, the host protocol,
    # training from the UI), modal screens, the panes, their assembly, the app
    ("minigpt_tui.curve_store",),  # the Loss pane's curve as data: what the plot widget draws
    ("minigpt_tui.textual_compat",),  # every use of Textual past its documented API
    ("minigpt_tui.widgets",),
    (
        "minigpt_tui.messages", "minigpt_tui.session", "minigpt_tui.host", "minigpt_tui.demo", "minigpt_tui.header",
        "minigpt_tui.commands", "minigpt_tui.train_args", "minigpt_tui.training", "minigpt_tui.training_session",
        "minigpt_tui.check_runs",
        "minigpt_tui.idle_gc", "minigpt_tui.disk_watch", "minigpt_tui.focus", "minigpt_tui.runtime",
    ),
    ("minigpt_tui.screens",),
    ("minigpt_tui.panes",),
    ("minigpt_tui.workbench",),
    ("minigpt_tui.app", "minigpt_tui.setup_flow", "minigpt_tui.quit_flow"),  # the app, the flows it runs on screens
]  # fmt: skip
OUTSIDE = {"minigpt", "minigpt.__main__", "minigpt_tui", "minigpt_tui.__main__"}


def floor_of(module: str) -> int:
    for i, prefixes in enumerate(FLOORS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return i
    raise AssertionError(f"{module} is on no floor: add its folder to FLOORS")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{name} -> {target}"
        for name, targets in graph.items()
        if name not in OUTSIDE
        for target in targets
        if target not in OUTSIDE and floor_of(target) > floor_of(name)
    )


def test_the_ui_imports_the_library_and_never_the_reverse():
    graph = import_graph()
    assert not [
        f"{n} -> {t}" for n, ts in graph.items() if n.startswith("minigpt.") for t in ts if t.startswith("minigpt_tui")
    ]


def test_no_import_points_up_a_floor():
    assert upward_imports(import_graph()) == []


def test_every_module_of_minigpt_is_in_a_folder_of_the_pipeline():
    """Nothing but the floor everything stands on (errors, device, threads) lies flat in minigpt/."""
    flat = sorted(p.stem for p in (ROOT / "minigpt").glob("*.py") if p.stem not in {"__init__", "__main__"})
    assert flat == ["device", "errors", "threads"]


def test_the_floor_finder_sees_an_upward_import():
    assert upward_imports({"minigpt.data.corpus": {"minigpt.train.trainer"}, "minigpt.train.trainer": set()}) == [
        "minigpt.data.corpus -> minigpt.train.trainer"
    ]
