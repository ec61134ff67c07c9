"""The `minigpt` command line: exit codes, JSON report, report diff, import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from minigpt.cli import main


def test_check_exit_code_0_on_healthy_workspace_and_json_report(trained_workspace, tmp_path):
    out = tmp_path / "report.json"
    code = main(
        ["check", "--workspace", str(trained_workspace.root), "--skip-overfit", "--device", "cpu", "--json", str(out)]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["schema_version"] == 2
    assert {f["role"] for f in report["judged"]} >= {"checkpoint", "metrics", "tokenizer", "train_ids"}
    for key in (
        "tokenizer_fingerprint",
        "vocab_size",
        "token_range",
        "batch_shape",
        "initial_loss",
        "expected_baseline",
        "gradient_norm",
        "missing_gradients",
        "parameter_update_size",
        "single_batch_final_loss",
        "environment",
        "timings",
        "checks",
    ):
        assert key in report
    assert report["missing_gradients"] == []
    assert {c["id"] for c in report["checks"]} >= {"environment", "gradients", "checkpoint_load"}


def test_check_exit_code_1_when_a_fault_is_injected(trained_workspace, capsys):
    code = main(
        [
            "check",
            "--workspace",
            str(trained_workspace.root),
            "--skip-overfit",
            "--device",
            "cpu",
            "--inject",
            "no_shift",
        ]
    )
    assert code == 1
    out = capsys.readouterr().out
    assert "batch_shift" in out and "cause:" in out


def test_check_exit_code_2_on_bad_usage(tiny_workspace, capsys):
    assert main(["check", "--workspace", str(tiny_workspace.root), "--only", "no_such_check"]) == 2
    assert "unknown check id" in capsys.readouterr().err


def test_check_exit_code_2_on_an_unavailable_device(tiny_workspace, capsys):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: nothing to refuse")
    assert main(["check", "--workspace", str(tiny_workspace.root), "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_report_diff_shows_status_changes(trained_workspace, tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = [
        "check",
        "--workspace",
        str(trained_workspace.root),
        "--skip-overfit",
        "--device",
        "cpu",
        "--only",
        "batch_shift",
    ]
    main(base + ["--json", str(a)])
    main(base + ["--json", str(b), "--inject", "no_shift"])
    capsys.readouterr()
    assert main(["report", "diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "batch_shift: pass -> fail" in out
    assert main(["report", "diff", str(a), str(tmp_path / "missing.json")]) == 2


def test_sample_and_prepare_refuse_bad_input_with_exit_2(tiny_workspace, capsys):
    assert main(["sample", "--workspace", str(tiny_workspace.root), "--temperature", "-1"]) == 2
    assert main(["prepare", "--workspace", str(tiny_workspace.root), "--source", "demo"]) == 2
    assert "--force" in capsys.readouterr().err


@pytest.mark.slow
def test_library_never_imports_rich_or_textual():
    code = (
        "import sys, minigpt, minigpt.checks, minigpt.checks.engine, minigpt.train.trainer, minigpt.sample.generate, "
        "minigpt.data.prepare, minigpt.logs.curve, minigpt.cli, minigpt.cli.check, minigpt.cli.train; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('rich', 'textual')]; print(bad); sys.exit(bool(bad))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_python_dash_m_minigpt_works():
    result = subprocess.run([sys.executable, "-m", "minigpt", "check", "--list"], capture_output=True, text=True)
    assert result.returncode == 0 and "causal_independence" in result.stdout


def test_check_on_a_named_checkpoint_that_does_not_exist_exits_2_naming_it(tiny_workspace, capsys):
    code = main(["check", "--workspace", str(tiny_workspace.root), "--checkpoint", "does/not/exist.pt"])
    assert code == 2
    assert "does/not/exist.pt" in capsys.readouterr().err
