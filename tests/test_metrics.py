"""The metrics reader in bounded memory: `read_metrics` reads a log in blocks into compact columns,
with what each line parses to on its own. (Peak memory and time are measured in benchmarks/run.py.)"""

from __future__ import annotations

import json
import math

import pytest

from minigpt.logs import metrics as metrics_log
from minigpt.logs.metrics import MetricPoint, MetricPoints, parse_line, read_metrics, series

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
