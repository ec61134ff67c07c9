"""What `minigpt check`, `train` and `prepare` print in an 80-column terminal: lines that fit (a
number or a duration never broken by the terminal), one line for checks skipped for the same
reason, the UI's words for the demo's expected warning, and progress that only shows totals it
knows (a `--time` run's bar counts its time budget; a resume counts the steps it ran)."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.cells import cell_len

from minigpt.cli import main
from minigpt.data.corpus import DEMO_EXPECTED

WIDTH = 80
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def columns_80(monkeypatch):
    """Output as an 80-column terminal gets it: COLUMNS says the width."""
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    for name in ("TTY_COMPATIBLE", "TTY_INTERACTIVE", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def terminal_80(columns_80, monkeypatch):
    """A live terminal of 80 columns: rich draws its progress bars (cursor codes are stripped by `screen`)."""
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("NO_COLOR", "1")


def screen(text: str) -> str:
    return ANSI.sub("", text).replace("\r", "\n")


def fits(text: str) -> list[str]:
    """The lines wider than the terminal (it would break them wherever column 80 falls), except a
    line that ends in one word wider than the terminal (a long path: no line could hold it)."""
    return [
        line
        for line in text.splitlines()
        if cell_len(line) > WIDTH and len(line.split()) > 1 and cell_len(line.split()[-1]) <= WIDTH
    ]


def test_check_fits_80_columns_and_says_a_shared_skip_reason_once(trained_workspace, tmp_path, columns_80, capsys):
    report = tmp_path / "report.json"
    args = ["check", "--workspace", str(trained_workspace.root), "--device", "cpu", "--skip-overfit"]
    assert main([*args, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert fits(out) == []
    # every check's line ends with its duration, whole: "(0.01s)", never "(0." / "01s)"
    assert not re.search(r"\(\d*\.?\d*\n|\n\d*\.?\d+s\)", out)
    # the JSON report keeps each check's own result: grouping is only for people reading
    loop = [r for r in json.loads(report.read_text())["checks"] if r["stage"] == "loop"]
    assert len(loop) > 10 and all(r["status"] == "skip" and "no watched loop" in r["summary"] for r in loop)
    assert out.count("no watched loop") == 1
    assert re.search(rf"^- skip  {len(loop)} loop checks +no watched loop in", out, re.M), out


def test_verbose_check_names_the_checks_a_group_skipped(trained_workspace, columns_80, capsys):
    args = ["check", "--workspace", str(trained_workspace.root), "--device", "cpu", "--skip-overfit", "-v"]
    assert main([*args, "--only", "loop_grads_cleared,loop_memory"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 loop checks no watched loop" in out and "loop_grads_cleared, loop_memory" in out


def test_the_demo_workspaces_split_overlap_warning_says_why_it_is_expected_in_the_uis_words(
    tmp_path, columns_80, capsys
):
    ws = tmp_path / "demo"
    assert main(["prepare", "--source", "demo", "--workspace", str(ws)]) == 0
    capsys.readouterr()
    assert main(["check", "--workspace", str(ws), "--device", "cpu", "--only", "split_overlap"]) == 0
    out = capsys.readouterr().out
    assert fits(out) == []
    assert "! warn" in out
    assert DEMO_EXPECTED["split_overlap"] in " ".join(out.split())
    assert "1 warn (expected for the demo)" in out


def test_a_workspace_of_other_text_gets_no_demo_note(tiny_workspace, columns_80, capsys):
    main(["check", "--workspace", str(tiny_workspace.root), "--device", "cpu", "--only", "split_overlap"])
    assert "expected for the demo" not in capsys.readouterr().out


def test_train_shape_line_fits_80_columns_with_its_numbers_whole(tiny_workspace, columns_80, capsys):
    args = ["train", "--workspace", str(tiny_workspace.root), "--device", "cpu", "--quiet"]
    assert main([*args, "--steps", "2", "--eval-interval", "2"]) == 0
    err = capsys.readouterr().err
    assert fits(err) == []
    assert re.search(r"\bbatch_size 8;", err) and re.search(r"(^| )\d{1,3}(,\d{3})* parameters", err, re.M)


@pytest.mark.slow
def test_a_time_budget_bar_counts_the_budget_never_a_moving_step_total(tiny_workspace, terminal_80, capsys):
    args = ["train", "--workspace", str(tiny_workspace.root), "--device", "cpu", "--time", "2s"]
    assert main(args) == 0
    err = screen(capsys.readouterr().err)
    # GIVEN a budget of 2 s, the steps are planned (and planned again) while it runs; THEN the
    # bar never shows a step total (the preset's, then each plan's), and its total is the budget
    assert not re.search(r"step +\d+/\d+", err), err
    assert "of 0:00:02" in err
    assert fits(err) == []


def test_a_resume_with_nothing_to_do_draws_no_bar(trained_workspace, terminal_80, capsys):
    assert main(["train", "--workspace", str(trained_workspace.root), "--device", "cpu", "--resume"]) == 0
    err = screen(capsys.readouterr().err)
    assert "nothing to do" in err
    assert not re.search(r"step +\d+/\d+", err) and "-:--:--" not in err, err
    assert fits(err) == []


def test_a_resume_reports_the_steps_it_ran(trained_workspace, columns_80, capsys):
    args = ["train", "--workspace", str(trained_workspace.root), "--device", "cpu", "--quiet", "--resume"]
    assert main([*args, "--steps", "125"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "done: 5 steps (from step 120 to 125) in" in err


def test_prepare_says_it_is_loading_torch_and_its_duration_covers_the_whole_command(tmp_path, terminal_80, capsys):
    assert main(["prepare", "--source", "demo", "--workspace", str(tmp_path / "ws")]) == 0
    out = screen(capsys.readouterr().out)
    assert "loading torch" in out  # drawn before the import, the seconds a first run is silent
    total, loading, preparing = map(
        float, re.search(r"done in ([\d.]+) s \(loading torch ([\d.]+) s, preparing ([\d.]+) s\)", out).groups()
    )
    assert total >= loading + preparing - 0.02  # each figure is rounded to 0.01 s


def test_report_diff_says_a_change_shared_by_several_checks_once(trained_workspace, tmp_path, columns_80, capsys):
    import shutil

    # GIVEN two reports of the same run in two folders: each loop check's skip names its folder
    other = tmp_path / "elsewhere" / "with a longer name than the first"
    shutil.copytree(trained_workspace.root, other)
    loop = "loop_grads_cleared,loop_scheduler,loop_memory"
    for root, report in ((trained_workspace.root, "a.json"), (other, "b.json")):
        main(["check", "--workspace", str(root), "--device", "cpu", "--only", loop, "--json", str(tmp_path / report)])
    capsys.readouterr()
    assert main(["report", "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    out = capsys.readouterr().out
    # THEN the change is said once for the three checks, in lines that fit
    assert out.count("no watched loop") == 2  # was and now, once each
    assert out.startswith("3 checks (loop_grads_cleared, loop_scheduler, loop_memory): no watched loop")
    assert fits(out) == []


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_imports_before_a_command_say_so_on_a_terminal_and_wipe_the_line():
    from minigpt.cli.startup import preload

    # GIVEN a terminal WHEN prepare's slow imports load THEN a line says so, wiped when they are in
    terminal = _Terminal()
    preload("prepare", status=terminal)
    assert terminal.getvalue() == "loading torch…\r\x1b[K"
    # a pipe or a file gets nothing; a command without slow imports neither
    piped = io.StringIO()
    preload("prepare", status=piped)
    preload("report", status=(quiet := _Terminal()))
    assert piped.getvalue() == "" and quiet.getvalue() == ""
