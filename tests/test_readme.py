"""The README and the docs stay true: every check, fault, module and pane they list exists, none is
missing, every link lands, and the README's commands are the ones CI runs."""

from __future__ import annotations

import re
from pathlib import Path

from minigpt.checks import FAULTS, ordered_ids

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "docs").glob("*.md"))}
CHECKS_DOC = DOCS["checks.md"]
ARCHITECTURE = DOCS["architecture.md"]


def _table(text: str, header: str) -> str:
    return text[text.index(header) :].split("\n\n", 1)[0]


def test_the_readme_is_short_enough_to_finish():
    assert len(README.splitlines()) <= 250


def test_the_check_table_lists_every_check_in_pipeline_order():
    table = _table(CHECKS_DOC, "| id | what it asserts | what it cannot see |")
    assert re.findall(r"^\| `([a-z_]+)` \|", table, re.M) == ordered_ids()


def test_every_check_row_says_what_it_cannot_see():
    table = _table(CHECKS_DOC, "| id | what it asserts | what it cannot see |")
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 and cells[2], row


def test_the_fault_table_lists_every_fault_and_its_intended_check():
    table = _table(CHECKS_DOC, "| fault | trips |")
    rows = dict(re.findall(r"^\| `([a-z_]+)`[^|]* \| `([a-z_]+)`", table, re.M))
    assert rows == {name: f.intended for name, f in FAULTS.items()}


def test_the_code_map_names_every_module_of_both_packages():
    layout = ARCHITECTURE.split("```", 2)[1]
    missing = [
        str(module.relative_to(ROOT))
        for package in ("minigpt", "minigpt_tui")
        for module in sorted((ROOT / package).rglob("*.py"))
        if module.name not in ("__init__.py", "__main__.py")
        and not re.search(rf"(?<![\w.]){re.escape(module.name)}(?!\w)", layout)
    ]
    assert not missing, f"modules missing from docs/architecture.md's code map: {missing}"


def test_the_readme_key_row_names_every_pane():
    from minigpt_tui.workbench import PANES

    readme_keys = README[README.index(f"| `1`–`{len(PANES)}` |") :].split("\n", 1)[0]
    for _, title in PANES:
        assert title.split(" ")[0] in readme_keys, title


def _anchors(text: str) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_relative_link_in_the_readme_and_docs_lands():
    pages = {ROOT / "README.md": README} | {ROOT / "docs" / name: text for name, text in DOCS.items()}
    broken = []
    for page, text in pages.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://")):
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, broken


def test_ci_runs_exactly_the_readmes_set_up_and_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
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


def test_the_metrics_schema_table_lists_every_field_of_the_record():
    from minigpt.logs.record import FIELDS

    table = _table(DOCS["workspace.md"], "| key | meaning |")
    documented = set(re.findall(r"`([a-z_]+)`", "\n".join(line.split(" | ")[0] for line in table.splitlines())))
    assert documented == set(FIELDS)
