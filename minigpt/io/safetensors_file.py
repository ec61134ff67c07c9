"""Reading a `model.safetensors` header without trusting it, before the safetensors library sees the file.

The format: 8 bytes, a little-endian length N; N bytes of UTF-8 JSON mapping each tensor's name to
`{"dtype", "shape", "data_offsets": [begin, end]}`, plus an optional `"__metadata__"` of strings;
then the data, the offsets counted from its first byte. `read_safetensors_header` checks all of it
against the file's size (a truncated save, a header that is not JSON, offsets past the end, sizes
that disagree with shape x dtype, tensors that overlap or leave gaps: the library reads them back to
back) and refuses with a `CheckpointError` naming the file and what is wrong. It reads only the
header, which the library itself caps at 100 MB.
"""

from __future__ import annotations

import math
import os
import reprlib
import struct
from dataclasses import dataclass
from pathlib import Path

from minigpt.errors import CheckpointError
from minigpt.io.files import lfs_pointer_message, os_error, read_head, stat_input
from minigpt.io.jsonsafe import parse_json

MAX_HEADER_BYTES = 100_000_000  # the safetensors library refuses a longer header ("header too large")
METADATA_KEY = "__metadata__"
MAX_DIM = 2**63 - 1  # torch keeps sizes as int64
MAX_DIMS = 64  # a model's weights have one to four dimensions
# bytes per element of the dtypes the library reads into torch tensors (the format's names)
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E4M3FNUZ": 1,
    "F8_E5M2": 1,
    "F8_E5M2FNUZ": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
    "C64": 8,
}
_CAUSES = ["an interrupted save or copy", "the file was edited, or is not a safetensors file"]


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str  # the format's name ("F32", "BF16")
    shape: tuple[int, ...]
    begin: int  # data offsets, relative to the first byte after the header
    end: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsHeader:
    path: Path
    size: int  # bytes in the file
    tensors: tuple[TensorEntry, ...]
    metadata: dict[str, str]

    @property
    def stored_values(self) -> int:
        """Values the file holds, all tensors together."""
        return sum(t.numel for t in self.tensors)

    def float_dtype(self) -> str | None:
        """The dtype of the first floating-point tensor (what `dtype="auto"` loads), None without one."""
        return next((t.dtype for t in self.tensors if t.dtype.startswith(("F", "BF"))), None)


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsHeader:
    """The header of the safetensors file at `path`, checked against the file; a CheckpointError naming
    the file and the fault otherwise."""
    path = Path(path)
    st = stat_input(path, "Checkpoint", error=CheckpointError)
    size = st.st_size
    if size == 0:
        raise CheckpointError(f"Not a safetensors file: {path} is 0 bytes (an interrupted save?)", path=path)
    lfs = lfs_pointer_message(path, read_head(path), size)
    if lfs:
        raise CheckpointError(f"Not a safetensors file: {lfs}", path=path)
    if size < 8:
        raise _corrupt(path, size, "it is shorter than the 8-byte header length that starts the format")
    try:
        with open(path, "rb") as fh:
            (length,) = struct.unpack("<Q", fh.read(8))
            if length > MAX_HEADER_BYTES:
                raise _corrupt(
                    path,
                    size,
                    f"its header length field says {length:,} bytes, past the format's limit of "
                    f"{MAX_HEADER_BYTES:,} (a real header is a few KB per hundred tensors)",
                )
            if length > size - 8:
                raise _corrupt(
                    path,
                    size,
                    f"its header length field says {length:,} bytes but only {size - 8:,} follow it (truncated?)",
                )
            raw = fh.read(length)
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    if len(raw) < length:  # it shrank since the stat
        raise _corrupt(path, size, f"its {length:,}-byte header ends after {len(raw):,} bytes (truncated?)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _corrupt(path, size, f"its header is not UTF-8 text (byte {exc.start + 8:,})") from None
    data = parse_json(
        text,
        path=path,
        error=CheckpointError,
        what="read as a safetensors header",
        lead="Not a readable safetensors file: ",
    )
    if not isinstance(data, dict):
        raise _corrupt(path, size, f"its header is JSON {type(data).__name__}, not an object of tensors")
    metadata = _metadata(path, size, data.get(METADATA_KEY, {}))
    tensors = tuple(_entry(path, size, name, info) for name, info in data.items() if name != METADATA_KEY)
    _check_layout(path, size, size - 8 - length, tensors)
    return SafetensorsHeader(path, size, tensors, metadata)


def _corrupt(path: Path, size: int, problem: str) -> CheckpointError:
    return CheckpointError(
        f"Not a readable safetensors file: {path} ({size:,} bytes): {problem}", path=path, causes=_CAUSES
    )


def _metadata(path: Path, size: int, value: object) -> dict[str, str]:
    if value is None:  # the library reads `null` as no metadata
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _corrupt(path, size, f"its {METADATA_KEY} is not an object of strings: {_short(value)}")
    return value


def _entry(path: Path, size: int, name: str, info: object) -> TensorEntry:
    where = f"tensor {_short(name)}"
    if not isinstance(info, dict):
        raise _corrupt(
            path, size, f"{where} is described by {_short(info)}, not an object with dtype, shape, data_offsets"
        )
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise _corrupt(path, size, f"{where} has dtype {_short(dtype)}, not one of {', '.join(DTYPE_BYTES)}")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise _corrupt(path, size, f"{where} has shape {_short(shape)}, not a list of non-negative integers")
    if any(d > MAX_DIM for d in shape):  # even in a tensor of no values (a 0 elsewhere in its shape)
        raise _corrupt(path, size, f"{where} has shape {_short(shape)}: a dimension past 2**63 - 1, torch's limit")
    if math.prod(max(1, d) for d in shape) * DTYPE_BYTES.get(dtype, 8) > MAX_DIM:
        # a 0 in the shape makes no values, but the library multiplies the other sizes first and
        # torch the strides (the sizes after each dimension): either overflows past 2**63 - 1
        raise _corrupt(
            path, size, f"{where} has shape {_short(shape)}: its sizes multiply past 2**63 - 1 (torch's limit)"
        )
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_count(o) for o in offsets):
        raise _corrupt(path, size, f"{where} has data_offsets {_short(offsets)}, not [begin, end]")
    begin, end = offsets
    if begin > end:
        raise _corrupt(path, size, f"{where} has data_offsets [{begin:,}, {end:,}]: it ends before it begins")
    if len(shape) > MAX_DIMS:
        raise _corrupt(path, size, f"{where} has {len(shape):,} dimensions, more than {MAX_DIMS} (weights have a few)")
    entry = TensorEntry(name, dtype, tuple(shape), begin, end)
    claimed = entry.numel * DTYPE_BYTES[dtype]
    if claimed != end - begin:
        said = f"{claimed:,} bytes" if claimed <= 2**64 else "more bytes than any file holds"
        raise _corrupt(
            path,
            size,
            f"{where} is {dtype} of shape {_short(shape)}: {said}, but its data_offsets "
            f"[{begin:,}, {end:,}] span {end - begin:,}",
        )
    return entry


def _check_layout(path: Path, size: int, data_bytes: int, tensors: tuple[TensorEntry, ...]) -> None:
    """Every tensor inside the data, none overlapping another, back to back from the first byte to the
    last (the library reads them so, and refuses a gap or bytes left over)."""
    at, previous = 0, None
    for entry in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if entry.end > data_bytes:
            raise _corrupt(
                path,
                size,
                f"tensor {_short(entry.name)} lies at bytes [{entry.begin:,}, {entry.end:,}) of the data, past its "
                f"end: the file holds {data_bytes:,} bytes after the header (truncated?)",
            )
        if entry.begin < at:
            raise _corrupt(
                path,
                size,
                f"tensors {_short(previous.name if previous else '')} and {_short(entry.name)} overlap "
                f"(bytes [{entry.begin:,}, {at:,}) of the data)",
            )
        if entry.begin > at:
            raise _corrupt(
                path, size, f"{entry.begin - at:,} bytes before tensor {_short(entry.name)} belong to no tensor"
            )
        at, previous = entry.end, entry
    if at != data_bytes:
        raise _corrupt(path, size, f"the last {data_bytes - at:,} bytes of the data belong to no tensor")


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value: object) -> str:
    """`value` as a short repr: a hostile header's lists and strings may be megabytes long."""
    return _SHORT.repr(value)


_SHORT = reprlib.Repr()
_SHORT.maxlist = _SHORT.maxdict = 8
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlong = 40
