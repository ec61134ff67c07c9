"""The README's maps stay true: every check, fault and pane it lists exists, and none is missing."""

from __future__ import annotations

import re
from pathlib import Path

from minigpt.checks import FAULTS, ordered_ids

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _table_ids(header: str) -> list[str]:
    """The backticked first cells of the markdown table that follows `header`."""
    block = README[README.index(header) :]
    rows = re.findall(r"^\| `([a-z_]+)`", block.split("\n\n", 2)[1] if block.startswith("|") else block, re.M)
    return rows


def test_the_check_table_lists_every_check_in_pipeline_order():
    table = README[README.index("| id | what it asserts | what it cannot see |") :].split("\n\n", 1)[0]
    assert re.findall(r"^\| `([a-z_]+)` \|", table, re.M) == ordered_ids()


def test_every_check_row_says_what_it_cannot_see():
    table = README[README.index("| id | what it asserts | what it cannot see |") :].split("\n\n", 1)[0]
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 and cells[2], row


def test_the_fault_table_lists_every_fault_and_its_intended_check():
    table = README[README.index("| fault | trips |") :].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)`[^|]* \| `([a-z_]+)`", table, re.M))
    assert rows == {name: f.intended for name, f in FAULTS.items()}


def test_the_house_map_names_every_module_of_the_library_and_the_panes():
    layout = README[README.index("## How the code is laid out") :].split("```", 2)[1]
    root = Path(__file__).resolve().parents[1]
    for module in sorted((root / "minigpt").glob("*.py")) + sorted((root / "minigpt" / "checks").glob("*.py")):
        if module.name not in ("__init__.py", "__main__.py", "adapter.py", "control.py", "fault_modules.py"):
            assert module.name in layout, f"{module.name} is not in the README's map"
    from minigpt_tui.workbench import PANES

    readme_keys = README[README.index("| `1`–`7` |") :].split("\n", 1)[0]
    for _, title in PANES:
        assert title.split(" ")[0] in readme_keys, title


def test_ci_runs_exactly_the_readmes_set_up_and_test_command():
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text(encoding="utf-8")
    steps = [
        line.split("#", 1)[0].strip()
        for line in ci.splitlines()
        if line.startswith(("pip ", "ruff ", "mypy", "python -m pytest"))
    ]
    opening = README.split("```bash\n", 1)[1].split("```", 1)[0]
    test_line = next(line for line in opening.splitlines() if "what CI runs" in line).split("#", 1)[0].strip()
    # the README's test command is CI's steps up to the default tier; CI then runs the slow tier,
    # a command the README's Tests section gives
    assert test_line == " && ".join(steps[:-1])
    assert steps[-1] == "python -m pytest -q --full -m slow"
    tests_section = README.split("## Tests\n", 1)[1].split("\n## ", 1)[0]
    assert steps[-1] in tests_section.split("```bash\n", 1)[1].split("```", 1)[0]
