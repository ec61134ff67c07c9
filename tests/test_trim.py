"""The logs a run writes and `--resume` cuts back: streamed in bounded memory, lines too long or too
deep moved aside (never deleted), and a log that is a link or a FIFO refused, never followed."""

from __future__ import annotations

import json
import os

import pytest

from minigpt.cli import main
from minigpt.errors import UnsafePathError
from minigpt.logs.trim import MAX_LINE_BYTES, trim_log


def test_trim_keeps_up_to_the_step_and_moves_unreadable_lines_aside(tmp_path):
    log = tmp_path / "metrics.jsonl"
    lines = [b'{"step": 1}\n', b"[" * 200_000 + b"\n", b'{"step": 2}\n', b'{"step": 3}\n', b'{"step": 2.5']
    log.write_bytes(b"".join(lines))
    moved, aside = trim_log(log, 2)
    assert log.read_bytes() == b'{"step": 1}\n{"step": 2}\n'
    assert moved == 2 and aside.read_bytes() == b"[" * 200_000 + b'\n{"step": 2.5\n'  # a cut last line too


def test_a_line_longer_than_the_cap_is_moved_aside_whole_as_it_streams(tmp_path):
    log = tmp_path / "grads.jsonl"
    long = b'{"step": 1, "x": "' + b"q" * (MAX_LINE_BYTES + 5) + b'"}\n'
    log.write_bytes(b'{"step": 1}\n' + long + b'{"step": 2}\n')
    moved, aside = trim_log(log, 5)
    assert moved == 1 and aside.read_bytes() == long
    assert log.read_bytes() == b'{"step": 1}\n{"step": 2}\n'


def test_a_log_without_a_newline_at_all_is_moved_aside_and_the_log_emptied(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b"z" * (MAX_LINE_BYTES * 2))
    moved, aside = trim_log(log, 5)
    assert moved == 1 and aside.stat().st_size == MAX_LINE_BYTES * 2 + 1
    assert log.read_bytes() == b""


def test_an_untouched_log_is_not_rewritten(tmp_path):
    log = tmp_path / "metrics.jsonl"
    log.write_bytes(b'{"step": 1}\n{"step": 2}\n')
    before = os.stat(log).st_ino
    assert trim_log(log, 2)[0] == 0
    assert os.stat(log).st_ino == before


def test_trim_refuses_a_log_that_is_a_link(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(b'{"step": 1}\n{"step": 9}\n')
    log = tmp_path / "metrics.jsonl"
    log.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        trim_log(log, 1)
    assert outside.read_bytes() == b'{"step": 1}\n{"step": 9}\n'


def test_resume_with_a_symlinked_metrics_log_exits_2_and_leaves_its_target(trained_workspace, tmp_path, capsys):
    ws = trained_workspace
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(ws.metrics.read_bytes())
    ws.metrics.unlink()
    ws.metrics.symlink_to(outside)
    before = outside.read_bytes()
    code = main(["train", "--workspace", str(ws.root), "--resume", "--steps", "130", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "symbolic link" in err and "metrics.jsonl" in err
    assert outside.read_bytes() == before


def test_a_fresh_run_replaces_a_fifo_log_without_opening_it(tiny_workspace, capsys):
    tiny_workspace.metrics.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(tiny_workspace.metrics)  # opening it for writing would block until a reader came
    code = main(["train", "--workspace", str(tiny_workspace.root), "--preset", "debug", "--steps", "2", "--quiet"])
    assert code == 0
    assert tiny_workspace.metrics.is_file()
    assert 2 in [json.loads(line)["step"] for line in tiny_workspace.metrics.read_text().splitlines()]


def test_resume_refuses_a_metrics_log_that_is_a_fifo_at_once(trained_workspace, capsys):
    ws = trained_workspace
    ws.metrics.unlink()
    os.mkfifo(ws.metrics)
    code = main(["train", "--workspace", str(ws.root), "--resume", "--steps", "130", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "is a FIFO (named pipe)" in err and str(ws.metrics) in err, err
