"""Every allocation budgeted before it is spent: one sizing rule for every model built from a config
someone else wrote (check's checkpoint and fresh-model checks, --config), refusing with the figure
and --allow-large; readers of logs bounded in line length and nesting, linear in the bytes."""

from __future__ import annotations

import json
import os

import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.cli import main
from minigpt.errors import CheckpointError, ResourceError
from minigpt.logs.follow import MetricsFollower
from minigpt.logs.metrics import MAX_LINE_BYTES, read_metrics
from minigpt.model.factory import default_model_factory, require_buildable
from minigpt.model.memory import large_allowed

HUGE = {"num_layers": 100_000, "embedding_dim": 4096}  # about 75,000 GiB of float32


def huge_checkpoint(ws, tmp_path):
    data = torch.load(ws.best_checkpoint, weights_only=True)
    data["config"].update(HUGE)
    path = tmp_path / "huge.pt"
    torch.save(data, path)
    return path


def test_checkpoint_load_refuses_a_config_far_bigger_than_its_weights_before_building(trained_workspace, tmp_path):
    path = huge_checkpoint(trained_workspace, tmp_path)
    opts = CheckOptions(workspace=trained_workspace.root, checkpoint=path, skip_overfit=True)
    report = run_checks(CheckContext(opts), only=["checkpoint_load"])
    result = report.by_id()["checkpoint_load"]
    assert result.id == "checkpoint_load" and result.status is Status.FAIL
    assert "does not fit its config" in result.summary and "refused before building" in result.summary


def test_the_fresh_model_checks_refuse_a_config_past_the_machines_memory(trained_workspace, tmp_path):
    # GIVEN a checkpoint whose config is huge: the fresh-model checks build from that config too
    path = huge_checkpoint(trained_workspace, tmp_path)
    opts = CheckOptions(workspace=trained_workspace.root, checkpoint=path, skip_overfit=True)
    report = run_checks(CheckContext(opts), only=["forward_shapes"])
    bad = [r for r in report.results if r.status in (Status.FAIL, Status.ERROR)]
    # THEN the first check that builds it fails with the estimate and the machine's memory
    assert bad and "GiB" in bad[0].summary and "total RAM" in bad[0].summary


def test_default_model_factory_sizes_before_building():
    config = {"vocab_size": 65, "block_size": 64, "num_heads": 4, **HUGE}
    with pytest.raises(ResourceError, match=r"would need about [\d.]+ GiB .* but the cpu device has") as info:
        default_model_factory(config)
    assert any("--allow-large" in c for c in info.value.causes)


def test_allow_large_lifts_the_memory_refusal_only_inside_its_block():
    config = {"vocab_size": 65, "block_size": 64, "num_heads": 4, **HUGE}
    with large_allowed():
        assert require_buildable(config, "x") > 10**12  # estimated, not refused
    with pytest.raises(ResourceError):
        require_buildable(config, "x")


def test_a_file_that_holds_a_fraction_of_what_its_config_claims_is_refused_even_under_allow_large():
    config = {"vocab_size": 65, "block_size": 64, "num_heads": 4, "num_layers": 16, "embedding_dim": 4096}
    with large_allowed(), pytest.raises(CheckpointError, match="the file holds 1,000 values"):
        require_buildable(config, "ckpt.pt", stored=1000)


def test_check_with_a_config_past_memory_exits_2_at_once_with_the_figure(tiny_workspace, tmp_path, capsys):
    config = tmp_path / "big.json"
    config.write_text(json.dumps({"vocab_size": 100, "block_size": 1024, "num_heads": 16, **HUGE}))
    code = main(["check", "--workspace", str(tiny_workspace.root), "--checkpoint", "none", "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--config {config} would need about" in err and "pass --allow-large" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("what", ["config", "report"])
def test_json_nested_200000_deep_is_invalid_json_naming_the_file(tiny_workspace, tmp_path, capsys, what):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    if what == "config":
        args = ["check", "--workspace", str(tiny_workspace.root), "--checkpoint", "none", "--config", str(deep)]
    else:
        args = ["report", "diff", str(deep), str(deep)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"{deep}" in err and ("too deeply nested" in err or "Not a JSON report" in err), err
    assert "Traceback" not in err and "RecursionError" not in err


# --- logs: linear, lines capped, nesting bounded ---


def test_a_metrics_file_without_a_newline_is_one_bad_line_read_in_bounded_memory(tmp_path):
    # GIVEN a good record, then 24 MB with no newline (the reader must not copy it block after block)
    path = tmp_path / "metrics.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"step": 1, "train_loss": 2.0}\n')
        fh.write(b"x" * (24 << 20))
    log = read_metrics(path)
    assert [p.step for p in log.points] == [1]
    assert log.bad_lines == 1 and log.bad_line_numbers == [2] and not log.partial_tail


def test_an_overlong_line_in_the_middle_is_counted_and_the_lines_after_it_are_read(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(path, "wb") as fh:
        fh.write(b'{"step": 1, "train_loss": 2.0}\n')
        fh.write(b'{"step": 2, "note": "' + b"y" * (9 << 20) + b'"}\n')
        fh.write(b'{"step": 3, "train_loss": 1.5}\n')
    log = read_metrics(path)
    assert [p.step for p in log.points] == [1, 3]
    assert log.bad_line_numbers == [2]


def test_the_ui_follower_caps_a_growing_line_and_recovers_after_its_newline(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "train_loss": 2.0}\n' + b"z" * (MAX_LINE_BYTES + 10))
    follower = MetricsFollower(path)
    assert [p.step for p in follower.poll(max_bytes=1 << 20)] == [1]
    assert [p.step for p in follower.poll(max_bytes=1 << 20)] == []
    assert len(follower.tail) <= MAX_LINE_BYTES  # never the whole line
    with open(path, "ab") as fh:
        fh.write(b'\n{"step": 2, "train_loss": 1.0}\n')
    assert [p.step for p in follower.poll()] == [2]
    assert follower.bad_lines == 1


def test_a_metrics_line_nested_200000_deep_is_a_bad_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "train_loss": 2.0}\n' + b"[" * 200_000 + b"\n" + b'{"step": 2, "train_loss": 1.0}\n')
    log = read_metrics(path)
    assert [p.step for p in log.points] == [1, 2] and log.bad_line_numbers == [2]
    follower = MetricsFollower(path)
    assert [p.step for p in follower.poll()] == [1, 2] and follower.bad_lines == 1


def test_the_ui_grads_follower_counts_a_line_nested_200000_deep_as_bad(tmp_path):
    from minigpt_tui.widgets.jsonl_follow import JsonlFollower

    path = tmp_path / "grads.jsonl"
    path.write_bytes(b"[" * 200_000 + b"\n" + b'{"step": 2, "rows": []}\n')
    follower = JsonlFollower(path)
    assert follower.poll() == [{"step": 2, "rows": []}] and follower.bad_lines == 1


def test_an_os_error_that_names_no_file_says_so_instead_of_a_question_mark():
    import errno

    from minigpt.io.files import os_error

    message = os_error(OSError(errno.ENOSPC, "No space left on device")).message
    assert message.startswith("Disk full: could not write a file (the OS did not name it)") and "?" not in message


def test_training_curve_names_a_metrics_log_that_is_a_fifo_without_opening_it(tiny_workspace, tmp_path):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    opts = CheckOptions(workspace=tiny_workspace.root, checkpoint="none", metrics=fifo, skip_overfit=True)
    result = run_checks(CheckContext(opts), only=["training_curve"]).by_id()["training_curve"]
    assert result.status is Status.FAIL and f"Not a metrics log: {fifo} is a FIFO" in result.summary
