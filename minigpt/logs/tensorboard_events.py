"""The scalar values in a chunk of event records: the layout `SummaryWriter.add_scalar` writes is
decoded for all its records at once with numpy; every other record (a tensor scalar, an image, a
TF1 summary of several values, a field in another order) is parsed by TensorBoard's own `Event`
protobuf class, one at a time.

The add_scalar layout, field by field as protobuf writes it (a record that differs in any byte of
the framing, or holds anything more, is left to the protobuf parser):

    09 wall_time(8) | [10 step(varint)] | 2a len | 0a len | 0a len tag | 15 simple_value(4)
    Event.wall_time   Event.step (absent   Event.   Summary.  Value.tag   Value.simple_value
                      when 0)               summary  value
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError  # protobuf comes with TensorBoard; this loads after it

from minigpt.logs.tensorboard_records import Chunk

_FLOAT, _DOUBLE, _HALF = 1, 2, 19  # TensorProto dtypes a scalar is written in
_FNV_OFFSET, _FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)
_MAX_LEN = 1 << 40  # a varint length above this cannot be a record's: clipped before arithmetic


@dataclass
class Values:
    """A chunk's scalar values in record order: value i was logged under `tags[tag[i]]` (as
    written) at `step[i]` by record `record[i]` of the chunk."""

    record: np.ndarray  # int64
    step: np.ndarray  # int64
    value: np.ndarray  # float64
    tag: np.ndarray  # int64, an index into `tags`
    tags: list[str]
    undecodable: list[int]  # records whose CRCs hold but whose data is no Event protobuf


def tensor_scalar(tensor: Any) -> float | None:
    """The one number of a scalar TensorProto (add_scalar(new_style=True), tf.summary.scalar); None
    for a tensor of several values or of another type."""
    if len(tensor.float_val) == 1:
        return float(tensor.float_val[0])
    if len(tensor.double_val) == 1:
        return float(tensor.double_val[0])
    if tensor.dtype == _HALF and len(tensor.half_val) == 1:
        return float(np.array([tensor.half_val[0]], np.uint16).view(np.float16)[0])
    content = tensor.tensor_content
    dtype = {_FLOAT: np.float32, _DOUBLE: np.float64, _HALF: np.float16}.get(tensor.dtype)
    if dtype is not None and len(content) == np.dtype(dtype).itemsize:
        return float(np.frombuffer(content, dtype)[0])
    return None


def _varints(arr: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each `pos` (as uint64) and its size in bytes; size 0 where it does not end
    before `end` within 10 bytes."""
    last = len(arr) - 1
    value = np.zeros(len(pos), np.uint64)
    size = np.zeros(len(pos), np.int64)
    live = np.arange(len(pos))  # rows whose varint goes on
    for k in range(10):
        byte = arr[np.minimum(pos[live] + k, last)].astype(np.uint64)
        value[live] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
        ends = byte < 0x80
        size[live[ends]] = k + 1
        live = live[~ends]
        if not len(live):
            break
    size[pos + size > end] = 0
    return value, size


def _add_scalar_layout(arr: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, ...]:
    """(matches, step, value, tag start, tag length) of each record read as the add_scalar layout;
    the other four are meaningless where `matches` is False."""
    last = len(arr) - 1

    def at(pos: np.ndarray) -> np.ndarray:
        return arr[np.clip(pos, 0, last)]

    ok = (end - start >= 17) & (at(start) == 0x09)
    pos = start + 9
    has_step = at(pos) == 0x10
    raw_step, size = _varints(arr, pos + 1, end)
    ok &= ~has_step | (size > 0)
    step = np.where(has_step, raw_step.view(np.int64), 0)
    pos = np.where(has_step, pos + 1 + size, pos)
    for tag_byte in (0x2A, 0x0A):  # Event.summary, then its one Summary.value: each runs to the record's end
        ok &= at(pos) == tag_byte
        length, size = _varints(arr, pos + 1, end)
        pos = pos + 1 + size
        ok &= (size > 0) & (pos + np.minimum(length, _MAX_LEN).astype(np.int64) == end)
    ok &= at(pos) == 0x0A  # Value.tag
    tag_len, size = _varints(arr, pos + 1, end)
    tag_len = np.minimum(tag_len, _MAX_LEN).astype(np.int64)
    tag_start = pos + 1 + size
    pos = tag_start + tag_len
    ok &= (size > 0) & (at(pos) == 0x15) & (pos + 5 == end)  # Value.simple_value, the record's last 4 bytes
    b = [at(pos + 1 + i).astype(np.uint32) for i in range(4)]
    value = (b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)).view(np.float32).astype(np.float64)
    return ok, step, value, tag_start, tag_len


def _tag_groups(arr: np.ndarray, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[bytes], np.ndarray]:
    """(group of each tag, the group's bytes, rows to leave to the parser): tags grouped by a hash
    of their bytes, each row then compared byte for byte with its group's first (a collision, or
    bytes that are not UTF-8, is left to the parser)."""
    last = len(arr) - 1
    width = int(length.max(initial=0))
    digest = _FNV_OFFSET ^ length.astype(np.uint64)
    for j in range(width):
        byte = np.where(length > j, arr[np.minimum(start + j, last)], 0).astype(np.uint64)
        digest = (digest ^ byte) * _FNV_PRIME
    order = np.argsort(digest, kind="stable")  # sorted, not hashed: np.unique's hash path is slow on 1M rows
    starts_group = np.concatenate([[True], digest[order][1:] != digest[order][:-1]]) if len(order) else order > 0
    first = order[starts_group]  # each group's first row
    group = np.empty(len(order), np.int64)
    group[order] = np.cumsum(starts_group) - 1
    rep_start, rep_len = start[first][group], length[first][group]
    differs = rep_len != length
    for j in range(width):
        inside = length > j
        differs |= inside & (arr[np.minimum(start + j, last)] != arr[np.minimum(rep_start + j, last)])
    names = [arr[start[i] : start[i] + length[i]].tobytes() for i in first]
    for g, name in enumerate(names):
        try:
            name.decode("utf-8")
        except UnicodeDecodeError:
            differs |= group == g
    return group, names, differs


def scalar_values(chunk: Chunk, parse: Any, plugins: dict[str, str]) -> Values:
    """The chunk's scalar values in record order. `parse` is TensorBoard's `Event.FromString`;
    `plugins` remembers each tag's plugin from its first metadata (TF1 writes it once a tag)."""
    arr = np.frombuffer(chunk.data, dtype=np.uint8)
    start = np.asarray(chunk.starts, dtype=np.int64)
    end = start + np.asarray(chunk.lengths, dtype=np.int64)
    ok, step, value, tag_start, tag_len = _add_scalar_layout(arr, start, end)
    fast = np.flatnonzero(ok)
    group, names, collided = _tag_groups(arr, tag_start[fast], tag_len[fast])
    fast, group = fast[~collided], group[~collided]
    tags = [name.decode("utf-8") for name in names]
    ids = {tag: i for i, tag in enumerate(tags)}
    slow = np.ones(len(start), bool)
    slow[fast] = False
    rec: list[int] = []
    steps: list[int] = []
    numbers: list[float] = []
    tag_ids: list[int] = []
    undecodable: list[int] = []
    data = memoryview(chunk.data)
    for i in np.flatnonzero(slow).tolist():
        try:
            event = parse(data[chunk.starts[i] : chunk.starts[i] + chunk.lengths[i]])
        except DecodeError:
            undecodable.append(i)
            continue
        for v in event.summary.value:
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                number: float | None = v.simple_value
            elif kind == "tensor" and _plugin(v, plugins) in ("scalars", ""):
                number = tensor_scalar(v.tensor)
            else:
                continue
            if number is not None:
                rec.append(i)
                steps.append(event.step)
                numbers.append(number)
                tag_ids.append(ids.setdefault(v.tag, len(ids)))
    tags = list(ids)
    record = np.concatenate([fast, np.asarray(rec, np.int64)])
    order = np.argsort(record, kind="stable")
    return Values(
        record[order],
        np.concatenate([step[fast], np.asarray(steps, np.int64)])[order],
        np.concatenate([value[fast], np.asarray(numbers, np.float64)])[order],
        np.concatenate([group, np.asarray(tag_ids, np.int64)])[order],
        tags,
        undecodable,
    )


def _plugin(value: Any, plugins: dict[str, str]) -> str:
    """The plugin of a value's tag, from the first metadata seen for it ("" when none says)."""
    plugin = plugins.get(value.tag)
    if plugin is None:
        plugin = plugins[value.tag] = value.metadata.plugin_data.plugin_name
    return plugin
