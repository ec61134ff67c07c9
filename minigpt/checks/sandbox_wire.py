"""What crosses from a sandboxed check process to the parent: JSON frames that carry an HMAC, never
a pickle, and the parent rebuilds every event from plain values it validates.

The child runs code nobody here wrote, in the same process that writes the events, so two things
must not follow from anything that process writes:

- code running in the parent: unpickling a frame would call whatever the frame names, so frames
  are JSON, parsed with a bounded size and depth, and turned into `CheckResult`s field by field;
- a verdict the engine did not reach: the model's code can find the event pipe (`/proc/self/fd`,
  `sys.argv`) and write an "all pass" frame on it. Each frame carries HMAC-SHA256 over its sequence
  number and body, keyed by a secret the parent hands the child on stdin before the model's file
  is imported; a frame that fails it was written by something other than the engine's `send`, and
  the parent names it so. Code that reads the check process's own memory could still find the key:
  the parent's checks on the sequence of events (`sandbox.py`) are the second line, and a model
  that sets out to deceive its own checks this way is outside what an in-process sandbox stops.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import struct
from typing import Any, BinaryIO

from minigpt.checks.control import CheckEvent, Finished, Progress, Started
from minigpt.checks.result import CheckResult, FileIdentity, Status

KEY_BYTES = 32
MAX_FRAME = 1 << 26  # a report with every check's values is a few hundred KB
MAX_DEPTH = 64  # values nest a few levels (gradient rows in a dict in a list)
_HEAD = struct.Struct("<I32s")  # the body's length, then HMAC-SHA256(key, sequence number ‖ body)
_SEQ = struct.Struct("<Q")


class WireError(Exception):
    """A frame the engine did not write, or not in the shape it writes; the message says which."""


def _mac(key: bytes, seq: int, body: bytes) -> bytes:
    return hmac.new(key, _SEQ.pack(seq) + body, hashlib.sha256).digest()


class FrameWriter:
    """The child's end: `send(kind, payload)` writes one authenticated JSON frame."""

    def __init__(self, out: BinaryIO, key: bytes):
        self._out, self._key, self._seq = out, key, 0

    def send(self, kind: str, payload: Any) -> None:
        body = json.dumps({"kind": kind, "payload": payload}, allow_nan=True, separators=(",", ":")).encode()
        self._out.write(_HEAD.pack(len(body), _mac(self._key, self._seq, body)) + body)
        self._seq += 1


class FrameReader:
    """The parent's end: `next()` returns `(kind, payload)`, None at EOF, or raises `WireError`."""

    def __init__(self, pipe: BinaryIO, key: bytes):
        self._pipe, self._key, self._seq = pipe, key, 0

    def next(self) -> tuple[str, Any] | None:
        head = _read_exactly(self._pipe, _HEAD.size)
        if head is None:
            return None
        size, mac = _HEAD.unpack(head)
        if size > MAX_FRAME:
            raise WireError(f"a frame of {size:,} bytes on the check pipe, larger than any the engine writes")
        body = _read_exactly(self._pipe, size)
        if body is None:
            raise WireError("a frame cut short on the check pipe")
        if not hmac.compare_digest(mac, _mac(self._key, self._seq, body)):
            raise WireError("a frame on the check pipe that the check engine did not write (its HMAC does not match)")
        self._seq += 1
        try:
            message = json.loads(body)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise WireError(f"an unreadable frame on the check pipe ({type(exc).__name__})") from None
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            raise WireError("a frame on the check pipe without a kind")
        return message["kind"], message.get("payload")


def _read_exactly(pipe: BinaryIO, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = pipe.read(left)
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------ values, both ways


def plain(value: object, depth: int = 0) -> Any:
    """A check's values as JSON can carry them: floats kept as they are (NaN and inf included),
    tuples as lists, anything else not JSON as its `str` (a check's values never hold tensors)."""
    if depth > MAX_DEPTH:
        return str(value)
    if isinstance(value, dict):
        return {str(k): plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, depth + 1) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _depth_ok(value: object, depth: int = 0) -> bool:
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_depth_ok(v, depth + 1) for v in value)
    return True


def _field(data: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"an event on the check pipe with a bad {name!r}")
    return value


def _strings(data: dict, name: str) -> list[str]:
    value = _field(data, name, list)
    if not all(isinstance(v, str) for v in value):
        raise WireError(f"an event on the check pipe with a bad {name!r}")
    return value


def result_to_wire(result: CheckResult) -> dict:
    return {
        "id": result.id,
        "stage": result.stage,
        "status": result.status.value,
        "summary": result.summary,
        "values": plain(result.values),
        "causes": [str(c) for c in result.causes],
        "fixes": [str(f) for f in result.fixes],
        "notes": [str(n) for n in result.notes],
        "duration_s": float(result.duration_s),
    }


def result_from_wire(data: Any) -> CheckResult:
    if not isinstance(data, dict):
        raise WireError("a check result on the check pipe that is not an object")
    status = _field(data, "status", str)
    if status not in {s.value for s in Status}:
        raise WireError(f"a check result on the check pipe with status {status[:40]!r}")
    values = _field(data, "values", dict)
    if not _depth_ok(values):
        raise WireError("a check result on the check pipe nested deeper than the engine writes")
    duration = _field(data, "duration_s", (int, float))
    return CheckResult(
        _field(data, "id", str),
        _field(data, "stage", str),
        Status(status),
        _field(data, "summary", str),
        values=values,
        causes=_strings(data, "causes"),
        fixes=_strings(data, "fixes"),
        notes=_strings(data, "notes"),
        duration_s=float(duration) if math.isfinite(duration) else 0.0,
    )


def event_to_wire(event: CheckEvent) -> tuple[str, dict]:
    if isinstance(event, Started):
        return "started", {"check_id": event.check_id, "index": event.index, "total": event.total}
    if isinstance(event, Progress):
        return "progress", {"check_id": event.check_id, "fraction": float(event.fraction)}
    return "finished", {"result": result_to_wire(event.result), "index": event.index, "total": event.total}


def event_from_wire(kind: str, data: Any) -> CheckEvent:
    if not isinstance(data, dict):
        raise WireError(f"a {kind[:20]!r} event on the check pipe that is not an object")
    if kind == "started":
        return Started(_field(data, "check_id", str), _field(data, "index", int), _field(data, "total", int))
    if kind == "progress":
        fraction = _field(data, "fraction", (int, float))
        return Progress(_field(data, "check_id", str), min(1.0, max(0.0, float(fraction))))
    if kind == "finished":
        return Finished(result_from_wire(data.get("result")), _field(data, "index", int), _field(data, "total", int))
    raise WireError(f"an event of unknown kind {kind[:20]!r} on the check pipe")


def ending_to_wire(fault_notes: list[str], judged: list[FileIdentity], seconds: float) -> dict:
    """What the child's report adds to its results; the parent assembles the report itself."""
    return {"fault_notes": [str(n) for n in fault_notes], "judged": [f.to_dict() for f in judged], "seconds": seconds}


def ending_from_wire(data: Any) -> tuple[list[str], list[FileIdentity], float]:
    if not isinstance(data, dict):
        raise WireError("a report on the check pipe that is not an object")
    judged = []
    for item in _field(data, "judged", list):
        if not isinstance(item, dict):
            raise WireError("a report on the check pipe with a bad 'judged'")
        role, path = _field(item, "role", str), _field(item, "path", str)
        size, mtime, step = item.get("bytes"), item.get("mtime"), item.get("step")
        if not (
            (size is None or (isinstance(size, int) and not isinstance(size, bool)))
            and (mtime is None or isinstance(mtime, (int, float)))
            and (step is None or (isinstance(step, int) and not isinstance(step, bool)))
        ):
            raise WireError("a report on the check pipe with a bad 'judged'")
        judged.append(FileIdentity(role, path, size, mtime, step))
    seconds = _field(data, "seconds", (int, float))
    return _strings(data, "fault_notes"), judged, float(seconds)
