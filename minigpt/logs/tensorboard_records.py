"""The record framing of a TensorBoard event file (TFRecord), read a chunk at a time with every
CRC checked at numpy speed, so that a damaged record is found, named and skipped, never taken for
the end of the file.

Each record is, little-endian:

    uint64 length | uint32 masked CRC-32C of those 8 bytes | data[length] | uint32 masked CRC-32C of data

TensorBoard's own reader (without TensorFlow installed, a pure-Python stand-in) checks both CRCs a
byte at a time in Python and ends the file silently at the first record that fails, which looks
exactly like a file still being written. `read_records` tells the cases apart:

- a damaged record (a bad length CRC, a bad data CRC, or a record cut short with whole records
  after it): a `Damage`, and reading goes on at the next valid record (one whose length CRC and
  data CRC both hold); where none follows, the rest of the file is the damage;
- the file's last record cut short with nothing valid after it: a writer still writing (a live
  run). Not damage: the next read starts at that record;
- the end of a chunk: the next read starts at the first record not wholly read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np

HEADER = 12  # uint64 length + uint32 masked CRC of the length
FOOTER = 4  # uint32 masked CRC of the data
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), bit-reflected
_MASK_DELTA = 0xA282EAD8  # TFRecord's CRC mask: rotate right by 15, add this
_LANE = 256  # a long record's CRC is computed as lanes of this many bytes, then combined
_SCAN = 1 << 20  # bytes searched at a time for the next valid record after a damaged one
_BATCH = 1 << 16  # records framed, then checked, at a time
_LENGTH = struct.Struct("<Q")


def _crc_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    return table


_TABLE = _crc_table()


def _zero_shift() -> np.ndarray:
    """The CRC register after _LANE zero bytes, as a function of the register before: linear, so one
    table per byte of the register (rows 0-3), whose entries are XORed."""
    reg = np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None]
    for _ in range(_LANE):
        reg = _TABLE[reg & 0xFF] ^ (reg >> 8)
    return reg


_SHIFT = _zero_shift()


def _registers(data: np.ndarray, ends: np.ndarray, lengths: np.ndarray, init: np.ndarray) -> np.ndarray:
    """The CRC register after feeding each segment `data[end - length:end]` from its `init`, all
    segments at once. Segments are aligned on their last byte and sorted longest first, so at each
    column the segments being fed are a prefix: a column costs a few numpy calls, whatever the count."""
    out = init.astype(np.uint32)
    if not len(lengths):
        return out
    order = np.argsort(-lengths, kind="stable")
    length, end, reg = lengths[order], ends[order], out[order]
    width = int(length[0])
    # segments fed at column j: those at least width - j long
    active = np.searchsorted(-length, -(width - np.arange(width)), side="right")
    for j in range(width):
        k = int(active[j])
        byte = data[end[:k] - (width - j)]
        reg[:k] = _TABLE[(reg[:k] ^ byte) & 0xFF] ^ (reg[:k] >> 8)
    out[order] = reg
    return out


def masked_crcs(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """TFRecord's masked CRC-32C of each segment `data[start:start + length]` (uint32s).

    A segment longer than _LANE is cut into lanes of _LANE bytes (the first one shorter) computed
    alongside the rest from a zero register, then combined: the register after A+B is the register
    after A shifted by B's zero bytes (`_SHIFT`) XOR B's own from zero, CRCs being linear."""
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    lanes = np.maximum(1, -(-lengths // _LANE))  # lanes per segment
    first = lengths - (lanes - 1) * _LANE  # the first lane takes the remainder
    owner = np.repeat(np.arange(len(lengths)), lanes)
    index = np.arange(len(owner)) - np.repeat(np.cumsum(lanes) - lanes, lanes)  # lane number in its segment
    lane_len = np.where(index == 0, first[owner], _LANE)
    lane_end = starts[owner] + first[owner] + index * _LANE
    init = np.where(index == 0, np.uint32(0xFFFFFFFF), np.uint32(0))
    lane_reg = _registers(data, lane_end, lane_len, init)
    reg = lane_reg[index == 0].copy()
    multi = np.flatnonzero(lanes > 1)
    base = (np.cumsum(lanes) - lanes)[multi]
    for k in range(1, int(lanes.max(initial=1))):
        rows = lanes[multi] > k
        multi, base = multi[rows], base[rows]
        r = reg[multi]
        shifted = _SHIFT[0][r & 0xFF] ^ _SHIFT[1][(r >> 8) & 0xFF] ^ _SHIFT[2][(r >> 16) & 0xFF] ^ _SHIFT[3][r >> 24]
        reg[multi] = shifted ^ lane_reg[base + k]
    crc = reg ^ np.uint32(0xFFFFFFFF)
    return (((crc >> 15) | (crc << 17)) + np.uint32(_MASK_DELTA)).astype(np.uint32)


def _u32_at(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The little-endian uint32 at each offset."""
    b = [data[offsets + i].astype(np.uint32) for i in range(4)]
    return b[0] | (b[1] << 8) | (b[2] << 16) | (b[3] << 24)


@dataclass(frozen=True)
class Damage:
    """An unreadable stretch of an event file: `offset` to `end` (file offsets), skipped."""

    offset: int
    end: int
    reason: str  # "bad length CRC", "bad data CRC", "record cut short", "no valid record after it"
    record: int  # how many good records of the chunk precede it (where its steps were lost)


@dataclass
class Chunk:
    """The records read from one chunk of a file: `data[starts[i]:starts[i] + lengths[i]]` is a
    record's data. `end` is where the next read starts; `tail` the bytes of a last record still
    being written (or of a chunk's cut record) left for it."""

    data: bytes
    base: int  # the file offset of data[0]
    starts: list[int]
    lengths: list[int]
    end: int
    tail: int = 0
    damage: list[Damage] = field(default_factory=list)


def _frame(buf: bytes, pos: int, limit: int) -> tuple[list[int], list[int], int]:
    """(data starts, data lengths, where framing stopped) of up to `limit` records: taken at their
    word, none checked."""
    starts: list[int] = []
    lengths: list[int] = []
    n, unpack = len(buf), _LENGTH.unpack_from
    while pos + HEADER <= n and len(starts) < limit:
        (length,) = unpack(buf, pos)
        end = pos + HEADER + length + FOOTER
        if end > n:
            break
        starts.append(pos + HEADER)
        lengths.append(length)
        pos = end
    return starts, lengths, pos


def _first_bad(arr: np.ndarray, starts: list[int], lengths: list[int]) -> tuple[int, str]:
    """The index of the first record whose length CRC or data CRC fails (len(starts) when none), and why."""
    if not starts:
        return 0, ""
    s = np.asarray(starts, dtype=np.int64)
    ln = np.asarray(lengths, dtype=np.int64)
    crcs = masked_crcs(arr, np.concatenate([s - HEADER, s]), np.concatenate([np.full(len(s), 8), ln]))
    head_ok = crcs[: len(s)] == _u32_at(arr, s - 4)
    data_ok = crcs[len(s) :] == _u32_at(arr, s + ln)
    bad = np.flatnonzero(~(head_ok & data_ok))
    if not len(bad):
        return len(starts), ""
    i = int(bad[0])
    return i, "bad length CRC" if not head_ok[i] else "bad data CRC"


def _valid_at(arr: np.ndarray, pos: int) -> bool:
    """Whether a whole record with both CRCs right starts at `pos` of `arr`."""
    if pos + HEADER > len(arr):
        return False
    (length,) = _LENGTH.unpack_from(arr.data, pos)
    if pos + HEADER + length + FOOTER > len(arr):
        return False
    i, _ = _first_bad(arr, [pos + HEADER], [length])
    return i == 1


def _next_valid(fh: BinaryIO, base: int, size: int, after: int) -> int | None:
    """The first file offset past `after` where a valid record starts (both CRCs right), or None.

    The length CRC is tried at every offset of a window at once (a false match is 1 in 2**32); a
    match is then read whole and its data CRC checked."""
    pos = after + 1
    while pos + HEADER <= size:
        fh.seek(base + pos)
        window = np.frombuffer(fh.read(min(_SCAN, size - pos) + HEADER), dtype=np.uint8)
        offsets = np.arange(max(0, len(window) - HEADER + 1), dtype=np.int64)
        crcs = masked_crcs(window, offsets, np.full(len(offsets), 8))
        for hit in np.flatnonzero(crcs == _u32_at(window, offsets + 8)).tolist():
            (length,) = _LENGTH.unpack_from(window.data, hit)
            if pos + hit + HEADER + length + FOOTER > size:
                continue
            fh.seek(base + pos + hit)
            record = np.frombuffer(fh.read(HEADER + length + FOOTER), dtype=np.uint8)
            if _valid_at(record, 0):
                return pos + hit
        pos += max(1, len(offsets))
    return None


def _header_ok(arr: np.ndarray, pos: int) -> bool:
    """Whether the 8 length bytes at `pos` match their CRC (the 12 header bytes must be there)."""
    crc = masked_crcs(arr, np.array([pos]), np.array([8]))
    return bool(crc[0] == _u32_at(arr, np.array([pos + 8]))[0])


def read_records(fh: BinaryIO, offset: int, size: int, max_bytes: int) -> Chunk:
    """The records of `fh` from `offset`, about `max_bytes` of them (at least one whole record when
    there is one), checked; `size` is the file's size as last seen (bytes beyond it are left for the
    next read). Damaged records are skipped and listed; see the module docstring."""
    fh.seek(offset)
    buf = fh.read(max(HEADER, min(max_bytes, size - offset)))
    if len(buf) >= HEADER and _header_ok(np.frombuffer(buf, dtype=np.uint8), 0):
        (length,) = _LENGTH.unpack_from(buf, 0)  # a first record larger than the chunk: read it whole
        whole = min(HEADER + length + FOOTER, size - offset)
        if len(buf) < whole:
            buf += fh.read(whole - len(buf))
    at_eof = offset + len(buf) >= size
    arr = np.frombuffer(buf, dtype=np.uint8)
    starts: list[int] = []
    lengths: list[int] = []
    damage: list[Damage] = []
    pos, batch = 0, _BATCH
    while True:
        s, ln, stop = _frame(buf, pos, batch)
        good, reason = _first_bad(arr, s, ln)
        starts += s[:good]
        lengths += ln[:good]
        resume: int | None
        if good == len(s) == batch:  # a clean batch: frame on, in larger batches
            pos, batch = stop, min(2 * batch, _BATCH)
            continue
        if good < len(s):  # a damaged record inside the chunk
            bad = s[good] - HEADER
            skip_to = bad + HEADER + ln[good] + FOOTER  # the framing's next record, when the length holds
            if reason == "bad data CRC" and (skip_to == len(buf) or _valid_at(arr, skip_to)):
                resume = skip_to
            else:
                resume = _next_valid(fh, offset, size - offset, bad)
                if reason == "bad data CRC" and resume is not None and resume < skip_to:
                    reason = "record cut short"  # a whole record starts inside the data it claims
        elif stop + HEADER <= len(buf) and not _header_ok(arr, stop):  # a length that cannot be trusted
            bad, reason = stop, "bad length CRC"
            resume = _next_valid(fh, offset, size - offset, bad)
        elif stop < len(buf) and at_eof:  # the file's last record is cut short: a live writer, or damage
            bad, reason = stop, "record cut short"
            resume = _next_valid(fh, offset, size - offset, bad) if len(buf) - stop >= HEADER else None
            if resume is None:
                return Chunk(buf, offset, starts, lengths, offset + stop, len(buf) - stop, damage)
        else:  # the chunk's end: the next read starts at its first record not wholly read
            return Chunk(buf, offset, starts, lengths, offset + stop, 0, damage)
        if resume is None:
            reason += "; no valid record after it"
        end = size - offset if resume is None else resume
        damage.append(Damage(offset + bad, offset + end, reason, len(starts)))
        if end >= len(buf):
            return Chunk(buf, offset, starts, lengths, offset + end, 0, damage)
        pos, batch = end, 16  # after damage, small batches: a file damaged throughout is not framed again and again
