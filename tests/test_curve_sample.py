"""A metrics log read in bounded memory (`minigpt.logs.curve_sample`): exact while short (the same
points as `merge_steps` of every record), a bounded, evenly thinned sample once long, with the
records no verdict may lose kept, and the verdict saying when it judged a downsample."""

from __future__ import annotations

import json
import math
import random
import tracemalloc

import pytest

from minigpt.logs import metrics
from minigpt.logs.curve_rules import diagnose
from minigpt.logs.curve_sample import CurveSample, sample_metrics
from minigpt.logs.metrics import MetricPoint, merge_steps, read_metrics
from minigpt.logs.sources import read_run_metrics


def _records(n: int, seed: int = 0, rewind_at: int | None = None) -> list[dict]:
    """A run's lines: a train line a step, an evaluation line every 50, and, at `rewind_at`, a
    resume that logs again from 100 steps back (its lines add fields and replace repeated ones)."""
    rng = random.Random(seed)
    out, step = [], 0
    while len(out) < n:
        step += 1
        if rewind_at is not None and len(out) == rewind_at:
            step -= 100
        out.append({"step": step, "train_loss": 4 / (1 + step / 500) + rng.gauss(0, 0.01), "lr": 3e-4})
        if step % 50 == 0:
            out.append({"step": step, "val_loss": 4 / (1 + step / 500) + 0.05})
    return out[:n]


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def _as_tuple(p: MetricPoint) -> tuple:
    return (p.step, p.train_loss, p.val_loss, p.lr, p.grad_norm, p.tokens_per_s, p.elapsed_s)


def test_a_short_log_is_read_exactly_as_every_record_merged_by_step(tmp_path):
    # GIVEN a log with evaluation lines at the train steps and a resume that logs 100 steps again
    path = tmp_path / "metrics.jsonl"
    _write(path, _records(3000, rewind_at=1500))
    # WHEN it is sampled under a cap it does not reach
    log = sample_metrics(path, cap=5000)
    # THEN the points are merge_steps of every record, nothing thinned, nothing noted
    expected = merge_steps(read_metrics(path).points)
    assert [_as_tuple(p) for p in log.points] == [_as_tuple(p) for p in expected]
    assert log.records == 3000 and log.notes == []


def test_a_long_log_keeps_a_bounded_number_of_steps_spread_over_the_run():
    # GIVEN 200,000 records added in blocks to a sample capped at 500 values a field
    sample = CurveSample(cap=500)
    for start in range(0, 200_000, 4096):
        steps = list(range(start + 1, min(start + 4097, 200_001)))
        absent = [None] * len(steps)
        sample.add_columns(steps, [[1.0 / s for s in steps], absent, [3e-4] * len(steps), absent, absent, absent])
    # THEN it holds at most the cap a field plus a few pinned and recent records, from the whole run
    points = sample.points()
    assert sample.records == 200_000 and sample.thinned
    assert len(points) <= 500 + 8 + 3, len(points)
    assert len(points) >= 250
    assert points[0].step == 1 and points[-1].step == 200_000
    gaps = {b.step - a.step for a, b in zip(points, points[1:-8])}
    assert gaps == {sample.stride("train_loss")}
    assert "judged a downsample" in (sample.note() or "")


def test_a_thinned_sample_keeps_the_first_nonfinite_loss_the_peak_and_the_last_record():
    # GIVEN a long log with one NaN and one spike at steps the stride would skip
    sample = CurveSample(cap=200)
    n = 50_000
    steps = list(range(1, n + 1))
    train: list[float | None] = [2.0 + 0.001 * (s % 7) for s in steps]
    train[33_332], train[41_110] = math.nan, 50.0  # steps 33,333 and 41,111 are odd: off every stride > 1
    grad: list[float | None] = [None] * n
    grad[-1] = math.inf
    sample.add_columns(steps, [train, [None] * n, [1e-3] * n, grad, [None] * n, [None] * n])
    kept = {p.step: p for p in sample.points()}
    # THEN those records survive thinning, with their learning rate
    assert math.isnan(kept[33_333].train_loss) and kept[33_333].lr == 1e-3
    assert kept[41_111].train_loss == 50.0
    assert kept[n].grad_norm == math.inf
    assert sample.stride("train_loss") > 1


def test_a_record_at_a_kept_step_still_merges_after_thinning():
    # GIVEN a sample already thinned, then an evaluation line and a summary at a kept step
    sample = CurveSample(cap=100, recent=0)
    steps = list(range(0, 10_000))
    sample.add_columns(steps, [[3.0] * len(steps)] + [[None] * len(steps)] * 5)
    stride = sample.stride("train_loss")
    step = 64 * stride  # on the stride from the first step (0)
    sample.add_columns([step], [[None], [2.5], [None], [None], [None], [None]])
    sample.add_columns([step], [[2.9], [None], [None], [None], [None], [None]])
    (point,) = [p for p in sample.points() if p.step == step]
    # THEN the later line replaced the train loss and kept the val loss
    assert (point.train_loss, point.val_loss) == (2.9, 2.5)


@pytest.mark.slow
def test_reading_a_log_ten_times_longer_takes_about_the_same_memory(tmp_path, monkeypatch):
    # GIVEN a 10,000-line and a 100,000-line log of the same run, each field of both longer than the sample's cap
    # and than a read block (made small so both files take many)
    monkeypatch.setattr(metrics, "READ_BLOCK", 1 << 16)
    short, long = tmp_path / "short.jsonl", tmp_path / "long.jsonl"
    _write(short, _records(10_000))
    _write(long, _records(100_000, seed=1))

    def peak(path) -> int:
        tracemalloc.start()
        log = read_run_metrics(path, cap=200)
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert log.records is not None and log.records >= 10_000
        return top

    # THEN the peak is bounded by the sample and a read block, not by the file's length
    small, large = peak(short), peak(long)
    assert large < 1.5 * small, (small, large)


def test_the_verdict_on_a_downsampled_log_says_so_and_matches_the_whole_log(tmp_path):
    # GIVEN a long healthy run, judged whole and as a sample capped well below its length
    path = tmp_path / "metrics.jsonl"
    _write(path, _records(20_000))
    whole = diagnose(read_metrics(path).points, baseline=math.log(65))
    log = read_run_metrics(path, cap=2_000)
    sampled = diagnose(log.points, baseline=math.log(65))
    # THEN the shape is the same, and the log's notes name the downsample
    assert sampled.shape == whole.shape
    assert any("judged a downsample" in note for note in log.notes)
