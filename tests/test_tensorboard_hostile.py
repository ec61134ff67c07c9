"""TensorBoard event files as they arrive after a crash, a bad disk or a copy cut short: a damaged
record is skipped and named with the steps it may have lost, never taken for the end of the file
(a diverging run read only up to it looked like `still_improving`); a last record still being
written is a live run, not damage. Also: the numpy CRC and the vectorised add_scalar decoding agree
with TensorBoard's own, and a followed run is read on from where it was left, not again whole."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c  # noqa: E402
from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from minigpt.logs.curve_rules import diagnose  # noqa: E402
from minigpt.logs.tensorboard import TensorBoardFollower, read_tensorboard  # noqa: E402

BASELINE = math.log(103)


def loss_at(step: int) -> float:
    """Falls to step 200, then climbs well above the uniform guess: judged only to step 150 it
    looks like a run still improving."""
    floor = 4.2 * math.exp(-200 / 80) + 1.5
    return 4.2 * math.exp(-step / 80) + 1.5 if step <= 200 else floor + 0.05 * (step - 200) ** 1.3


def diverging_run(folder: Path, text_at: int | None = None) -> Path:
    """A run logging train/loss every 2 steps to 300 (and a long text summary at `text_at`); its event file."""
    writer = SummaryWriter(str(folder))
    for step in range(0, 301, 2):
        if step == text_at:
            writer.add_text("notes", "x" * 3000, step)
        writer.add_scalar("train/loss", loss_at(step), step)
    writer.close()
    (events,) = folder.glob("events.out.tfevents.*")
    return events


def records(path: Path) -> dict[int, tuple[int, int]]:
    """step -> (file offset, data length) of the record holding a summary at that step (the last
    such record: add_text's precedes its step's loss). A plain reading of the framing, no CRC checked."""
    data, pos, out = path.read_bytes(), 0, {}
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        event = Event.FromString(data[pos + 12 : pos + 12 + length])
        if event.summary.value:
            out[event.step] = (pos, length)
        pos += 16 + length
    return out


def edit(path: Path, at: int, new: bytes, drop: int = 0) -> None:
    """Write `new` over the file at `at`, removing `drop` bytes there first."""
    data = path.read_bytes()
    path.write_bytes(data[:at] + new + data[at + drop :])


@pytest.mark.parametrize("chunk_bytes", [16 << 20, 200])  # the file read whole, or a few records at a time
def test_a_bad_data_crc_mid_file_is_skipped_named_and_the_rest_is_judged(tmp_path, monkeypatch, chunk_bytes):
    from minigpt.logs import tensorboard_scalars

    monkeypatch.setattr(tensorboard_scalars, "CHUNK_BYTES", chunk_bytes)
    # GIVEN a diverging run whose record at step 150 had one byte of its loss flipped on disk
    events = diverging_run(tmp_path / "run")
    at, length = records(events)[150]
    last = at + 12 + length - 1  # the loss's last byte
    edit(events, last, bytes([events.read_bytes()[last] ^ 0x40]), drop=1)
    # WHEN it is read
    log = read_tensorboard(tmp_path / "run")
    # THEN the steps after the damage are read, step 150 is left out, and the notes say where and which steps
    steps = [p.step for p in log.points]
    assert steps[-1] == 300 and 150 not in steps and len(steps) == 150
    (note,) = log.notes
    assert "unreadable" in note and "bad data CRC" in note and f"byte {at:,}" in note
    assert "steps between 148 and 152" in note
    # AND the run is judged on all of it: unstable, not still improving
    assert diagnose(list(log.points), baseline=BASELINE).shape == "unstable"


@pytest.mark.parametrize("chunk_bytes", [16 << 20, 200])
def test_a_bad_length_crc_resumes_at_the_next_valid_record(tmp_path, monkeypatch, chunk_bytes):
    from minigpt.logs import tensorboard_scalars

    monkeypatch.setattr(tensorboard_scalars, "CHUNK_BYTES", chunk_bytes)
    events = diverging_run(tmp_path / "run")
    at, _ = records(events)[150]
    edit(events, at + 1, b"\x7f", drop=1)  # the length is now ~32 KB more: not to be trusted
    log = read_tensorboard(events)
    steps = [p.step for p in log.points]
    assert steps[-1] == 300 and 150 not in steps and 152 in steps
    assert any("bad length CRC" in n and "steps between 148 and 152" in n for n in log.notes)


def test_a_record_cut_short_mid_file_is_named_as_cut(tmp_path):
    # GIVEN the record at step 150 lost its last 6 bytes (a copy that dropped a block), the rest intact
    events = diverging_run(tmp_path / "run")
    at, length = records(events)[150]
    edit(events, at + 12 + length - 2, b"", drop=6)
    log = read_tensorboard(events)
    assert [p.step for p in log.points][-1] == 300
    assert any("record cut short" in n and "steps between 148 and 152" in n for n in log.notes)


def test_a_long_record_cut_short_near_the_end_is_damage_when_whole_records_follow(tmp_path):
    # GIVEN a 3 KB text record at step 296 cut to 100 bytes, the records of steps 296-300 after it:
    # its length reaches past the end of the file, as a record still being written would
    events = diverging_run(tmp_path / "run", text_at=296)
    data = events.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        if length > 3000:
            break
        pos += 16 + length
    edit(events, pos + 112, b"", drop=length + 4 - 100)
    log = read_tensorboard(events)
    # THEN the scalars after it are read, and the cut record is named: whole records follow it
    assert [p.step for p in log.points][-3:] == [296, 298, 300]
    assert any("record cut short" in n for n in log.notes)


def test_a_file_damaged_throughout_keeps_its_good_records_and_counts_the_rest(tmp_path):
    # GIVEN every other record's loss damaged (a bad disk)
    events = diverging_run(tmp_path / "run")
    data = bytearray(events.read_bytes())
    for step, (at, length) in records(events).items():
        if step % 4 == 2:
            data[at + 12 + length - 1] ^= 0x40
    events.write_bytes(bytes(data))
    log = read_tensorboard(events)
    assert [p.step for p in log.points] == list(range(0, 301, 4))
    (note,) = log.notes
    assert note.count("bad data CRC") == 3 and "and 72 more" in note


def test_the_last_record_cut_short_is_a_live_writer_not_damage(tmp_path):
    # GIVEN a run whose writer has written half of its last record
    events = diverging_run(tmp_path / "run")
    whole = events.read_bytes()
    at, length = records(events)[300]
    events.write_bytes(whole[: at + 12 + length // 2])
    # WHEN it is read, and followed
    log = read_tensorboard(events)
    follower = TensorBoardFollower(tmp_path / "run")
    first = follower.poll()
    # THEN it reads to step 298 with no note, and the follower gives step 300 once it is written
    assert [p.step for p in log.points][-1] == 298 and log.notes == []
    assert first[-1].step == 298 and follower.notes == [] and follower.pending_bytes == 0
    events.write_bytes(whole)
    assert [p.step for p in follower.poll()] == [300] and not follower.reset and follower.notes == []


def test_garbage_after_the_last_record_is_named_with_the_steps_before_it(tmp_path):
    events = diverging_run(tmp_path / "run")
    with open(events, "ab") as fh:
        fh.write(bytes(64))  # zeros: a file extended by a crash, not a record
    log = read_tensorboard(events)
    assert [p.step for p in log.points][-1] == 300
    (note,) = log.notes
    assert "bad length CRC; no valid record after it" in note and "steps after 300" in note and "64 bytes" in note


def test_the_check_names_the_unreadable_part_as_a_user_runs_it(tiny_workspace, tmp_path, capsys):
    from minigpt.cli import main

    events = diverging_run(tmp_path / "run")
    at, length = records(events)[150]
    edit(events, at + 12 + length - 1, b"\x00", drop=1)
    rc = main(["check", "--workspace", str(tiny_workspace.root), "--metrics", str(events), "--only", "training_curve"])
    out = " ".join(capsys.readouterr().out.split())
    assert rc == 1 and "unstable" in out and "still_improving" not in out
    assert "is unreadable, skipped: bad data CRC" in out and "steps between 148 and 152 may be missing" in out


def test_the_follower_reads_a_backlog_in_chunks_and_then_only_what_was_added(tmp_path, monkeypatch):
    from minigpt.logs import tensorboard_scalars

    # GIVEN a run of 2,000 steps being written, followed 4 KB a poll
    real, read = tensorboard_scalars.read_records, []

    def counted(fh, offset, size, max_bytes):
        chunk = real(fh, offset, size, max_bytes)
        read.append(chunk.end - offset)
        return chunk

    monkeypatch.setattr(tensorboard_scalars, "read_records", counted)
    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(2000):
        writer.add_scalar("loss", 4.0 - step * 1e-3, step)
    writer.flush()
    follower = TensorBoardFollower(tmp_path / "run")
    polls = [follower.poll(max_bytes=4096) for _ in range(100) if not read or follower.pending_bytes]
    # THEN no poll read more than its share, the points came once the backlog was read, all of them
    assert len(polls) > 10 and max(read) <= 4096
    assert all(p == [] for p in polls[:-1]) and [p.step for p in polls[-1]] == list(range(2000))
    # WHEN the writer adds 5 steps
    read.clear()
    for step in range(2000, 2005):
        writer.add_scalar("loss", 4.0 - step * 1e-3, step)
    writer.close()
    # THEN the next poll reads only those records and gives only those points
    assert [p.step for p in follower.poll(max_bytes=4096)] == list(range(2000, 2005)) and not follower.reset
    assert sum(read) < 1000


def test_a_long_run_is_given_over_several_short_polls(tmp_path, monkeypatch):
    from minigpt.logs import tensorboard

    # GIVEN a follower that gives at most 100 points a poll, and a run of 1,000 steps
    monkeypatch.setattr(tensorboard, "_BLOCK", 40)
    monkeypatch.setattr(tensorboard, "_HAND_OUT", 100)
    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(1000):
        writer.add_scalar("loss", 4.0, step)
    writer.close()
    follower = TensorBoardFollower(tmp_path / "run")
    polls = [follower.poll()]
    while follower.pending_bytes:
        polls.append(follower.poll())
    # THEN every poll gave a share, in order, with no reset, and the follower said it was still loading
    assert len(polls) >= 8 and max(len(p) for p in polls) <= 120
    assert [p.step for poll in polls for p in poll] == list(range(1000)) and follower.resets == 0


def test_a_replaced_event_file_is_read_anew_as_a_reset(tmp_path):
    events = diverging_run(tmp_path / "run")
    follower = TensorBoardFollower(tmp_path / "run")
    assert len(follower.poll()) == 151
    # GIVEN the file replaced by a shorter run (a new file under the same name)
    fresh = tmp_path / "fresh"
    writer = SummaryWriter(str(fresh))
    for step in range(10):
        writer.add_scalar("train/loss", 3.0, step)
    writer.close()
    (new,) = fresh.glob("events*")
    new.replace(events)
    points = follower.poll()
    assert follower.reset and follower.resets == 1 and [p.step for p in points] == list(range(10))


def test_an_event_file_that_is_a_fifo_is_named_never_opened(tmp_path):
    import os

    from minigpt.errors import DataError

    diverging_run(tmp_path / "run")
    os.mkfifo(tmp_path / "run" / "events.out.tfevents.9.pipe")  # opening it would block
    with pytest.raises(DataError, match="events.out.tfevents.9.pipe is a FIFO"):
        read_tensorboard(tmp_path / "run")


# -- the numpy readers agree with TensorBoard's own -------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=1200), min_size=1, max_size=12))
def test_the_crc_matches_tensorboards_for_any_lengths(segments):
    from minigpt.logs.tensorboard_records import masked_crcs

    data = b"".join(segments)
    starts = np.cumsum([0] + [len(s) for s in segments[:-1]])
    got = masked_crcs(np.frombuffer(data, np.uint8), starts, np.array([len(s) for s in segments]))
    assert got.tolist() == [masked_crc32c(s) for s in segments]


finite_or_not = st.floats(width=32, allow_nan=True, allow_infinity=True)
summaries = st.one_of(
    st.tuples(st.text(max_size=150), finite_or_not).map(
        lambda t: Summary(value=[Summary.Value(tag=t[0], simple_value=t[1])])
    ),
    st.lists(st.tuples(st.text(max_size=8), finite_or_not), min_size=0, max_size=3).map(
        lambda vs: Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in vs])
    ),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), summaries), min_size=1, max_size=25
    )
)
def test_the_vectorised_add_scalar_decoding_agrees_with_the_protobuf(events):
    # GIVEN events of any step (0 and negative included), wall time, tag (unicode, long) and value,
    # some of the add_scalar layout and some not (several values, none)
    from minigpt.logs.tensorboard_events import scalar_values
    from minigpt.logs.tensorboard_records import Chunk

    payloads = [Event(step=s, wall_time=w, summary=summary).SerializeToString() for s, w, summary in events]
    starts = np.cumsum([0] + [len(p) for p in payloads[:-1]]).tolist()
    chunk = Chunk(b"".join(payloads), 0, starts, [len(p) for p in payloads], 0)
    got = scalar_values(chunk, Event.FromString, {})
    # THEN the values are those the protobuf reads, in record order
    expected = [
        (i, e.step, v.tag, v.simple_value)
        for i, e in enumerate(Event.FromString(p) for p in payloads)
        for v in e.summary.value
    ]
    values = [(int(r), int(s), got.tags[t], float(v)) for r, s, t, v in zip(got.record, got.step, got.tag, got.value)]
    assert len(values) == len(expected)
    for (r, s, tag, v), (er, es, etag, ev) in zip(values, expected):
        assert (r, s, tag) == (er, es, etag)
        assert v == ev or (math.isnan(v) and math.isnan(ev))


def test_tensor_scalars_of_any_writer_are_read(tmp_path):
    # GIVEN add_scalar(new_style=True): a float tensor with the scalars plugin, beside a plain loss
    writer = SummaryWriter(str(tmp_path / "run"))
    for step in range(5):
        writer.add_scalar("train/loss", 4.0 - step, step, new_style=True)
        writer.add_scalar("val/loss", 4.5 - step, step)
    writer.close()
    log = read_tensorboard(tmp_path / "run")
    assert [p.train_loss for p in log.points] == [4.0, 3.0, 2.0, 1.0, 0.0]
    assert [p.val_loss for p in log.points] == [4.5, 3.5, 2.5, 1.5, 0.5]
