"""The metrics log (`minigpt.logs.metrics`): one line parsed (other programs' key names, non-finite
strings), a whole file read in bounded blocks into compact columns with what each line parses to on
its own, and the plot's downsampling. (Peak memory and time of reading are in benchmarks/run.py.)"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from minigpt.errors import DataError
from minigpt.logs import metrics as metrics_log
from minigpt.logs.metrics import (
    MetricPoint,
    MetricPoints,
    merge_steps,
    parse_line,
    read_metrics,
    series,
)
from minigpt_tui.curve_store import downsample

MESSY = (
    '{"step": 1, "train_loss": 3.0, "lr": 0.001}\n'
    "\n"
    "not json\n"
    '{"iter": 2, "loss": 2, "valid_loss": "inf", "learning_rate": "3e-4"}\n'
    '{"step": 3, "train_loss": "nan", "grad_norm": true, "val_loss": null}\n'
    '{"step": 4.0, "train_loss": NaN}\n'
    '{"step": 99999999999999999999999, "train_loss": 1.0}\n'
    "[1, 2]\n"
    '{"step": 5, "train_loss": 1.5, "tokens_per_s": 10, "elapsed_s": 0.5}\n'
    '{"step": 6, "tr'
)


def same(a: MetricPoint, b: MetricPoint) -> bool:
    return all(
        (x is None and y is None) or (x is not None and y is not None and (x == y or (math.isnan(x) and math.isnan(y))))
        for x, y in ((getattr(a, f), getattr(b, f)) for f in ("step", *metrics_log._FIELDS))
    )


@pytest.mark.parametrize("block", [1, 16, 97, 1 << 22])
def test_reading_in_blocks_gives_what_each_line_parses_to(tmp_path, monkeypatch, block):
    path = tmp_path / "metrics.jsonl"
    path.write_text(MESSY, encoding="utf-8")
    monkeypatch.setattr(metrics_log, "READ_BLOCK", block)
    log = read_metrics(path)
    expected = [p for p in map(parse_line, MESSY.split("\n")[:-1]) if p is not None]
    assert len(log.points) == len(expected) == 5
    assert all(same(a, b) for a, b in zip(log.points, expected))
    assert log.bad_lines == 3 and log.bad_line_numbers == [3, 7, 8]
    assert log.partial_tail


def test_the_column_hot_path_converts_values_like_parse_line(tmp_path):
    # every record has only minigpt.train.trainer's keys: the column-wise path reads this block
    lines = [
        '{"step": 1, "train_loss": 3, "lr": "1e-3", "grad_norm": true}',
        '{"step": 2, "train_loss": "nan", "val_loss": 2.5, "lr": 0.001}',
        '{"step": 3, "train_loss": 2.25, "lr": 0.001, "time": 5.0, "nonfinite": true}',
    ]
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert metrics_log._plain_columns([line.encode() for line in lines]) is not None
    log = read_metrics(path)
    assert all(same(a, parse_line(line)) for a, line in zip(log.points, lines))
    assert (log.points[0].train_loss, log.points[0].lr, log.points[0].grad_norm) == (3.0, 0.001, None)


def test_metric_points_read_like_a_list_of_points():
    plain = [MetricPoint(1, train_loss=3.0), MetricPoint(2, val_loss=2.0, lr=1e-3), MetricPoint(3, train_loss=2.5)]
    points = MetricPoints(plain)
    assert len(points) == 3 and points == plain and list(points) == plain
    assert points[-1].step == 3 and points[1].val_loss == 2.0 and points[1].train_loss is None
    assert points[:2] == plain[:2]
    assert series(points, "train_loss") == series(plain, "train_loss") == ([1, 3], [3.0, 2.5])
    points.append(MetricPoint(4, train_loss=float("inf")))
    assert points[3].train_loss == math.inf
    with pytest.raises(IndexError):
        points[4]


def test_a_large_log_reads_in_bounded_blocks(tmp_path, monkeypatch):
    # GIVEN 20,000 lines read 4 KB at a time, WHEN read, THEN every point arrives in order
    path = tmp_path / "metrics.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for step in range(1, 20_001):
            record = {"step": step, "train_loss": 4.0 / step, "lr": 3e-4}
            if step % 100 == 0:
                record["val_loss"] = 5.0 / step
            fh.write(json.dumps(record) + "\n")
    monkeypatch.setattr(metrics_log, "READ_BLOCK", 4096)
    log = read_metrics(path)
    assert len(log.points) == 20_000 and log.bad_lines == 0 and not log.partial_tail
    steps, vals = series(log.points, "val_loss")
    assert steps == list(range(100, 20_001, 100)) and vals[0] == 0.05


# -- reading one line, a whole file ---------------------------------------------------------


def test_parse_line_normalises_aliases_and_nonfinite_strings():
    p = parse_line('{"iter": 12, "loss": 2.5, "valid_loss": "inf", "learning_rate": 3e-4}')
    assert (p.step, p.train_loss, p.val_loss, p.lr) == (12, 2.5, math.inf, 3e-4)
    p = parse_line('{"iteration": 3, "train_loss": "-inf", "eval_loss": NaN}')
    assert p.step == 3 and p.train_loss == -math.inf and math.isnan(p.val_loss)
    assert parse_line('{"step": 1, "val": 1.25}').val_loss == 1.25
    assert parse_line("   ") is None
    assert parse_line('{"train_loss": 2.0}') is None  # no step
    assert parse_line("[1, 2]") is None
    assert parse_line('{"step": 1, "loss": true}').train_loss is None


def test_read_metrics_counts_bad_lines_and_tolerates_a_partial_tail(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "train_loss": 3.0}\n\nnot json\n{"step": 2, "train_loss": 2.9}\n{"step": 3, "tr')
    log = read_metrics(path)
    assert [p.step for p in log.points] == [1, 2]
    assert log.bad_lines == 1 and log.bad_line_numbers == [3]
    assert log.partial_tail


def test_read_metrics_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError) as e:
        read_metrics(tmp_path / "nope.jsonl")
    assert "nope.jsonl" in str(e.value)


# -- several lines at one step ----------------------------------------------------------------

FINAL_LINE = Path(__file__).parent / "fixtures" / "curves" / "hf_end_of_training_line.jsonl"


def test_a_later_line_at_a_step_adds_its_fields_and_never_erases_one():
    # GIVEN step 100's train line, its evaluation line, then a loop's end-of-training summary (no losses)
    lines = [
        '{"step": 100, "train_loss": 1.9, "lr": 0.0005, "grad_norm": 1.0}',
        '{"step": 100, "val_loss": 2.8146, "eval_runtime": 0.4}',
        '{"step": 100, "train_runtime": 31.2, "total_flos": 1.2e12}',
    ]
    (merged,) = merge_steps(map(parse_line, lines))
    # THEN the step keeps every loss it was given
    assert (merged.step, merged.train_loss, merged.val_loss, merged.lr, merged.grad_norm) == (
        100,
        1.9,
        2.8146,
        5e-4,
        1.0,
    )


def test_a_step_logged_again_takes_the_new_values_and_steps_come_out_in_order():
    # GIVEN a resumed run that logs steps 20 and 30 again, the second time without a val loss at 30
    points = [MetricPoint(10, 3.0), MetricPoint(20, 2.8), MetricPoint(30, 2.6, val_loss=2.7), MetricPoint(20, 2.9)]
    points.append(MetricPoint(30, 2.65))
    merged = merge_steps(points)
    assert [(p.step, p.train_loss, p.val_loss) for p in merged] == [(10, 3.0, None), (20, 2.9, None), (30, 2.65, 2.7)]
    assert points[2].train_loss == 2.6  # the caller's points are left as they were


def test_the_loss_panes_store_reads_the_same_curve_as_the_check():
    # GIVEN the lines a Trainer's callback writes, read as the check reads them and as the Loss pane stores them
    from minigpt_tui.curve_store import CurveStore

    points = read_metrics(FINAL_LINE).points
    store = CurveStore()
    store.extend(list(points))
    fields = ("step", "train_loss", "val_loss", "lr")
    # THEN both give one point per step with the same losses: the last val (2.9 at step 100) in both
    check = [tuple(getattr(p, f) for f in fields) for p in merge_steps(points)]
    pane = [tuple(getattr(p, f) for f in fields) for p in store.points()]
    assert check == pane and check[-1][:3] == (100, 1.9056, 2.9)


# -- plotting -------------------------------------------------------------------------------


def test_downsample_a_million_points_keeps_the_spike():
    rng = random.Random(5)
    n, width = 1_000_000, 200
    xs = list(range(n))
    ys = [2.0 + rng.random() * 0.1 for _ in range(n)]
    ys[654_321] = 9.5
    ys[123_456] = -1.0
    dx, dy = downsample(xs, ys, width)
    assert len(dx) == len(dy) <= 2 * width
    assert max(dy) == 9.5 and dx[dy.index(9.5)] == 654_321
    assert min(dy) == -1.0
    assert dx == sorted(dx)


def test_downsample_drops_nonfinite_and_keeps_short_series():
    dx, dy = downsample([1, 2, 3], [1.0, math.nan, math.inf], 10)
    assert (dx, dy) == ([1], [1.0])
    assert downsample([1, 2], [3.0, 4.0], 1) == ([1, 2], [3.0, 4.0])
    with pytest.raises(ValueError):
        downsample([1], [1.0], 0)


def test_series_skips_absent_values():
    pts = [MetricPoint(1, train_loss=3.0), MetricPoint(2, val_loss=2.0), MetricPoint(3, train_loss=2.5)]
    assert series(pts) == ([1, 3], [3.0, 2.5])
    assert series(pts, "val_loss") == ([2], [2.0])
