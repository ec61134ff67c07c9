"""The sandbox's pipe carries JSON frames with an HMAC, never pickles: what the engine sends arrives
as it was (NaN and all), a frame anything else wrote is refused by name, and the parent holds the
events against the run's plan, so a forged verdict for a check is named even with the key."""

from __future__ import annotations

import io
import math
import pickle
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minigpt.checks.control import Finished, Progress, Started
from minigpt.checks.result import CheckResult, FileIdentity, Status
from minigpt.checks.sandbox import _Plan
from minigpt.checks.sandbox_wire import (
    MAX_DEPTH,
    FrameReader,
    FrameWriter,
    WireError,
    ending_from_wire,
    ending_to_wire,
    event_from_wire,
    event_to_wire,
)

KEY = b"k" * 32


def _frames(*messages, key=KEY) -> io.BytesIO:
    out = io.BytesIO()
    writer = FrameWriter(out, key)
    for kind, payload in messages:
        writer.send(kind, payload)
    return io.BytesIO(out.getvalue())


def _all(pipe, key=KEY) -> list:
    reader, got = FrameReader(pipe, key), []
    while (frame := reader.next()) is not None:
        got.append(frame)
    return got


def test_a_finished_event_arrives_as_the_engine_sent_it_non_finite_floats_included():
    result = CheckResult(
        "initial_loss",
        "model",
        Status.WARN,
        "loss nan",
        values={"loss": math.nan, "peak": math.inf, "shape": (8, 64), "rows": [{"name": "w", "norm": 1e-9}]},
        causes=["a cause"],
        notes=["a note"],
        duration_s=0.25,
    )
    [(kind, payload)] = _all(_frames(event_to_wire(Finished(result, 3, 40))))
    event = event_from_wire(kind, payload)
    assert isinstance(event, Finished) and (event.index, event.total) == (3, 40)
    got = event.result
    assert (got.id, got.stage, got.status, got.summary) == ("initial_loss", "model", Status.WARN, "loss nan")
    assert math.isnan(got.values["loss"]) and got.values["peak"] == math.inf
    assert got.values["shape"] == [8, 64] and got.values["rows"] == [{"name": "w", "norm": 1e-9}]
    assert (got.causes, got.notes, got.duration_s) == (["a cause"], ["a note"], 0.25)


def test_the_report_carries_what_it_judged():
    judged = [FileIdentity("checkpoint", "/w/ckpt.pt", 10, 1.5, 200)]
    [(kind, payload)] = _all(_frames(("report", ending_to_wire(["a note"], judged, 1.0))))
    assert kind == "report" and ending_from_wire(payload) == (["a note"], judged, 1.0)


def test_a_frame_written_with_another_key_is_refused():
    pipe = _frames(("report", ending_to_wire([], [], 0.0)), key=b"x" * 32)
    with pytest.raises(WireError, match="did not write"):
        _all(pipe)


def test_a_replayed_frame_is_refused():
    # the engine's own frame, written a second time: its sequence number no longer matches
    data = _frames(("started", {"check_id": "a", "index": 0, "total": 1})).getvalue()
    reader = FrameReader(io.BytesIO(data + data), KEY)
    assert reader.next() is not None
    with pytest.raises(WireError, match="did not write"):
        reader.next()


def test_a_pickle_on_the_pipe_is_refused_and_never_loaded(tmp_path):
    marker = tmp_path / "ran"

    class RunsCode:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    forged = pickle.dumps(("report", RunsCode()))
    with pytest.raises(WireError):
        _all(io.BytesIO(struct.pack("<I", len(forged)) + forged + bytes(64)))
    assert not marker.exists()


def test_an_oversized_or_cut_frame_is_refused():
    with pytest.raises(WireError, match="larger than any"):
        _all(io.BytesIO(struct.pack("<I32s", 1 << 30, bytes(32))))
    with pytest.raises(WireError, match="cut short"):
        _all(io.BytesIO(struct.pack("<I32s", 100, bytes(32)) + b"{}"))


def test_a_result_nested_deeper_than_the_engine_writes_is_refused():
    deep: object = 1
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    wire = event_to_wire(Finished(CheckResult("a", "model", Status.PASS, "ok"), 0, 1))[1]
    wire["result"]["values"] = {"deep": deep}
    with pytest.raises(WireError, match="deeper"):
        event_from_wire("finished", wire)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=10,
    )
)
def test_any_json_in_place_of_an_event_is_an_event_or_a_wire_error(value):
    for kind in ("started", "progress", "finished", "report", "unknown"):
        try:
            if kind == "report":
                ending_from_wire(value)
            else:
                event_from_wire(kind, value)
        except WireError:
            pass


# ------------------------------------------------------------------ the plan


def _result(cid: str, status: Status = Status.PASS) -> CheckResult:
    from minigpt.checks.registry import catalog

    return CheckResult(cid, catalog()[cid].stage, status, "x")


def test_the_plan_takes_the_engine_s_own_sequence():
    plan = _Plan(["initial_loss"], None)
    done: list[CheckResult] = []
    for index, cid in enumerate(plan.ids):
        started = Started(cid, index, len(plan.ids))
        assert plan.wrong("event", started, None, done) is None
        current = (cid, index, len(plan.ids))
        assert plan.wrong("event", Progress(cid, 0.5), current, done) is None
        assert plan.wrong("event", Finished(_result(cid), index, len(plan.ids)), current, done) is None
        done.append(_result(cid))
    assert plan.wrong("report", None, None, done) is None


def test_the_plan_names_a_pass_forged_behind_a_failed_dependency():
    # GIVEN forward_shapes failed: the engine reports initial_loss (which needs it) as skipped
    plan = _Plan(["initial_loss"], None)
    assert plan.ids[-2:] == ["forward_shapes", "initial_loss"]
    done = [_result(c) for c in plan.ids[:-2]] + [_result("forward_shapes", Status.FAIL)]
    n = len(plan.ids)
    current = ("initial_loss", n - 1, n)
    # THEN a pass for it is not the engine's; a skip is
    wrong = plan.wrong("event", Finished(_result("initial_loss"), n - 1, n), current, done)
    assert wrong == "pass for initial_loss, a check behind forward_shapes"
    assert plan.wrong("event", Finished(_result("initial_loss", Status.SKIP), n - 1, n), current, done) is None


def test_the_plan_names_a_report_before_the_last_check_and_a_start_out_of_order():
    plan = _Plan(["initial_loss"], None)
    assert "had not run" in plan.wrong("report", None, None, [])
    later = Started(plan.ids[-1], len(plan.ids) - 1, len(plan.ids))
    assert f"where the plan has {plan.ids[0]}" in plan.wrong("event", later, None, [])
    other = Finished(_result(plan.ids[-1]), 0, len(plan.ids))
    assert "not the check running" in plan.wrong("event", other, (plan.ids[0], 0, len(plan.ids)), [])
