"""The log follower (`minigpt.logs.follow`): complete lines only, a reset when the file is truncated,
replaced or rewritten in place, and only new bytes read from a big file."""

from __future__ import annotations

import json
import os

from minigpt.logs.follow import MetricsFollower


def test_follower_waits_for_newline_and_resets_on_truncation(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert follower.poll() == []  # not created yet
    with open(path, "a") as f:
        f.write('{"step": 1, "train_loss": 3.0}\n{"step": 2, "tr')
        f.flush()
        assert [p.step for p in follower.poll()] == [1]
        f.write('ain_loss": 2.9}\n')
        f.flush()
        got = follower.poll()
        assert [(p.step, p.train_loss) for p in got] == [(2, 2.9)]
        assert follower.poll() == [] and not follower.reset
        f.write('{"step": 3, "train_loss": 2.8}\n')
        f.flush()
        assert [p.step for p in follower.poll()] == [3]
    with open(path, "r+") as f:  # truncate in place (same inode)
        f.truncate(0)
        f.write('{"step": 1, "train_loss": 4.1}\n')
    got = follower.poll()
    assert follower.reset and follower.resets == 1
    assert [(p.step, p.train_loss) for p in got] == [(1, 4.1)]
    follower.poll()
    assert not follower.reset


def lines_text(last_step):
    return "".join(json.dumps({"step": s, "train_loss": 3.0}) + "\n" for s in range(1, last_step + 1))


def test_follower_resets_when_the_file_is_replaced_by_a_longer_one(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines_text(3))
    follower = MetricsFollower(path)
    assert len(follower.poll()) == 3
    # GIVEN an atomic rewrite (a fresh run) that starts with the same bytes and is longer
    tmp = tmp_path / "metrics.tmp"
    tmp.write_text(lines_text(5))
    os.replace(tmp, path)
    # THEN the new inode alone shows it: everything is read again
    got = follower.poll()
    assert follower.reset and [p.step for p in got] == [1, 2, 3, 4, 5]


def test_follower_resets_when_the_file_shrinks_keeping_its_start(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines_text(20))  # longer than the 256 head bytes the follower compares
    follower = MetricsFollower(path)
    follower.poll()
    with open(path, "r+") as f:  # a resume dropping lines after its checkpoint, in place
        f.truncate(len(lines_text(10)))
    got = follower.poll()
    assert follower.reset and [p.step for p in got] == list(range(1, 11))


def test_follower_resets_when_rewritten_in_place_with_other_content(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(lines_text(3))
    follower = MetricsFollower(path)
    follower.poll()
    with open(path, "r+") as f:  # same inode, not shorter, other first bytes
        f.write(lines_text(6).replace("3.0", "4.5"))
    got = follower.poll()
    assert follower.reset and [(p.step, p.train_loss) for p in got] == [(s, 4.5) for s in range(1, 7)]


def test_follower_reads_only_new_bytes_of_a_big_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    line = json.dumps({"step": 0, "train_loss": 2.0, "lr": 1e-3, "grad_norm": 0.5}) + "\n"
    path.write_text(line * 200_000)
    follower = MetricsFollower(path)
    assert len(follower.poll()) == 200_000
    with open(path, "a") as f:
        f.write(line)
    fed: list[int] = []
    feed = follower._splitter.feed
    follower._splitter.feed = lambda data: (fed.append(len(data)), feed(data))[1]
    assert len(follower.poll()) == 1
    assert sum(fed) == len(line)  # the new line's bytes only, not the 200,000 before it
