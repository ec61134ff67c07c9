"""Reading a file that `torch.save` wrote without trusting it: checkpoints, token files, imports.

`load_torch_file` is the one way minigpt reads such a file. Before torch sees it, the path must be
a regular file (a FIFO would block), not empty and not a Git LFS pointer. The file is then opened
as the zip archive it is and measured without unpacking anything: the records may not inflate to
more than a file of this size holds (a zip bomb fills memory when torch unpacks it), and the
pickle may not exceed a size and a number of operations (its unpickling time and memory). Only
then does `torch.load(weights_only=True)` read it, never with a fallback: a pickled class or
function is refused naming where it sits, and nothing in it runs. What was loaded is walked once,
to a depth and a number of values (shared references counted each time they appear, so a
self-referencing or exponentially shared structure is refused rather than walked forever), and
every tensor must hold the bytes its shape and strides claim (a stride-0 view claiming terabytes
would be allocated by the first `isfinite`).

A bare pickle (torch's legacy format: torch < 1.6, or `_use_new_zipfile_serialization=False`; or
`pickle.dump`) is refused with how to re-save it: nothing in it can be measured before it is read.
"""

from __future__ import annotations

import errno
import os
import pickle
import pickletools
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from minigpt.errors import MiniGPTError
from minigpt.io.files import lfs_pointer_message, os_error, read_head, stat_input

MAX_INFLATION = 16  # torch.save stores its records uncompressed; a re-zipped checkpoint shrinks by far less
INFLATION_FLOOR = 64 * 2**20  # a file of any size may unpack to this much
MAX_RECORDS = 100_000  # one record per tensor storage: a GPT-2 XL with its optimizer state has ~2,000
MAX_PICKLE_BYTES = 64 * 2**20  # a GPT-2 small checkpoint with its optimizer state pickles to ~50 KB
MAX_PICKLE_OPS = 1_000_000  # the same checkpoint's pickle runs ~17,000 operations
MAX_DEPTH = 32  # an optimizer's state nests five deep
MAX_VALUES = 1_000_000  # values met walking what was loaded, each shared reference counted again

ZIP_MAGIC = b"PK\x03\x04"
PICKLE_PROTOCOL = b"\x80"  # the first byte of a pickle of protocol 2 or later
# what a legacy torch.save file starts with: pickle protocol 2, then torch's magic number as a LONG1
LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
_ACCESS_ERRNOS = {errno.EACCES, errno.EPERM, errno.EIO, errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.ELOOP}
_EOCD, _ZIP64_LOCATOR = b"PK\x05\x06", b"PK\x06\x07"
# what unpickling damaged bytes raises besides UnpicklingError: an opcode applied to the wrong kind
# of value, a memo index that was never set, a persistent id that is not torch's tuple
_DAMAGED = (EOFError, ValueError, IndexError, KeyError, TypeError, AttributeError, AssertionError)
_TORCH_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)  # the only records torch's reader unpacks


@dataclass(frozen=True)
class TorchFileKind:
    """How refusals name one kind of torch file (a checkpoint, a token file) and what they suggest."""

    title: str  # "Checkpoint": starts "Checkpoint not found: PATH"
    what: str  # "checkpoint": "Not a checkpoint: PATH is 0 bytes"
    error: type[MiniGPTError]  # the typed error every refusal raises
    interrupted: str  # the likely cause of an empty file: "an interrupted save"
    missing: tuple[str, ...] = ()  # likely causes when the file is not there
    unsafe_causes: tuple[str, ...] = ()  # likely causes when it pickles classes or code


def load_torch_file(path: str | os.PathLike, kind: TorchFileKind) -> object:
    """What `torch.save` wrote to `path`, read within the limits above, or `kind.error` naming why not."""
    path = Path(path)
    st = stat_input(path, kind.title, error=kind.error, missing=list(kind.missing))
    if st.st_size == 0:
        raise kind.error(f"Not a {kind.what}: {path} is 0 bytes ({kind.interrupted}?)", path=path)
    head = read_head(path)
    lfs = lfs_pointer_message(path, head, st.st_size)
    if lfs:
        raise kind.error(f"Not a {kind.what}: {lfs}", path=path)
    if head.startswith(PICKLE_PROTOCOL):  # a bare pickle stream, not the zip torch.save writes
        legacy = "is in torch's legacy format" if head.startswith(LEGACY_MAGIC) else "is a bare pickle"
        raise kind.error(
            f"Not a readable {kind.what}: {path} {legacy} (torch < 1.6, saved with "
            "_use_new_zipfile_serialization=False, or pickle.dump), which minigpt does not read: its sizes "
            "cannot be checked before it is unpacked",
            path=path,
            causes=[
                "an old torch wrote it: re-save it with a current one, torch.save(torch.load(PATH, weights_only=True), "
                "NEW_PATH)",
                "pickle.dump wrote it: save tensors and plain values with torch.save instead",
            ],
        )
    pickle_name = _check_archive(path, st.st_size, head, kind)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except OSError as exc:
        if exc.errno in _ACCESS_ERRNOS:  # permission denied, an I/O error: not a corrupt file
            raise os_error(exc, path, action="read") from None
        raise _unreadable(path, st.st_size, kind, exc) from None  # torch says EINVAL for a damaged zip
    except pickle.UnpicklingError as exc:
        raise _refused_pickle(path, st.st_size, kind, exc, pickle_name) from None
    except (*_DAMAGED, RuntimeError, zipfile.BadZipFile) as exc:
        raise _unreadable(path, st.st_size, kind, exc) from None  # torch's readers on damaged records
    _check_loaded(data, path, kind)
    return data


def _unreadable(
    path: Path, size: int, kind: TorchFileKind, exc: BaseException, *, truncated: bool = False
) -> MiniGPTError:
    detail = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    truncated = truncated or isinstance(exc, EOFError)
    return kind.error(
        f"Not a readable {kind.what}: {path} ({size} bytes) {'looks truncated' if truncated else 'is corrupt'}: "
        f"it could not be read ({detail})",
        path=path,
        causes=["an interrupted save or copy", "the file is not a torch.save file"],
    )


def _refused(path: Path, kind: TorchFileKind, problem: str, causes: list[str]) -> MiniGPTError:
    return kind.error(f"Refused to load {path}: {problem}", path=path, causes=causes)


# --- the archive, measured before anything is unpacked ----------------------------------------


def _check_archive(path: Path, size: int, head: bytes, kind: TorchFileKind) -> str:
    """Refuse a zip whose records inflate beyond what the file can hold or whose pickle is too
    large or too long to run; return the pickle's record name. Reads the central directory and
    streams the pickle's opcodes, never holding a record in memory."""
    records = _declared_records(path, size)
    if records is None:
        reason = "is cut short: its zip directory is missing" if head.startswith(ZIP_MAGIC) else "is no zip archive"
        raise _unreadable(path, size, kind, ValueError(f"it {reason}"), truncated=head.startswith(ZIP_MAGIC))
    if records > MAX_RECORDS:
        raise _refused(
            path,
            kind,
            f"its zip directory lists {records:,} records, more than the {MAX_RECORDS:,} a {kind.what} needs",
            ["a crafted file (listing records costs memory before any is read)"],
        )
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            pickle_info = next(
                (i for i in infos if i.filename.count("/") == 1 and i.filename.endswith("/data.pkl")), None
            )
            if pickle_info is None:
                raise _unreadable(path, size, kind, ValueError("a zip archive without the data.pkl of torch.save"))
            foreign = next((i for i in infos if i.compress_type not in _TORCH_METHODS), None)
            if foreign is not None:
                method = f"record {foreign.filename} uses zip compression method {foreign.compress_type}"
                raise _unreadable(path, size, kind, ValueError(method))
            _refuse_inflation(path, size, infos, kind)
            if pickle_info.file_size > MAX_PICKLE_BYTES:
                raise _refused(
                    path,
                    kind,
                    f"its pickle ({pickle_info.filename}) is {pickle_info.file_size:,} bytes, more than the "
                    f"{MAX_PICKLE_BYTES:,} a {kind.what} needs (tensors are stored beside it, not in it)",
                    ["a crafted file", "large Python values (lists, strings) saved instead of tensors"],
                )
            with archive.open(pickle_info) as stream:
                _count_pickle_ops(stream, path, size, kind)
    except (*_DAMAGED, struct.error, zipfile.BadZipFile, RuntimeError, NotImplementedError) as exc:
        # a damaged directory or local header (a name that is not UTF-8, an offset past any file), an
        # encrypted record, a pickle cut short
        raise _unreadable(path, size, kind, exc) from None
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    return pickle_info.filename


def _declared_records(path: Path, size: int) -> int | None:
    """How many records the zip's end-of-directory record declares, or None where it has none (not
    a zip, or a zip cut short). Read from the file's tail before the directory itself is parsed."""
    try:
        with open(path, "rb") as fh:
            start = max(0, size - (22 + 0xFFFF))  # the record sits in the last 22 bytes + up to 64 KiB of comment
            fh.seek(start)
            tail = fh.read()
            at = tail.rfind(_EOCD)
            if at < 0 or len(tail) < at + 22:
                return None
            count = struct.unpack_from("<H", tail, at + 10)[0]
            if count == 0xFFFF and at >= 20 and tail[at - 20 : at - 16] == _ZIP64_LOCATOR:
                fh.seek(struct.unpack_from("<Q", tail, at - 12)[0] + 32)  # zip64 end record: total entries
                count = struct.unpack("<Q", fh.read(8).ljust(8, b"\0"))[0]
            return int(count)
    except OSError as exc:
        raise os_error(exc, path, action="read") from None


def _refuse_inflation(path: Path, size: int, infos: list[zipfile.ZipInfo], kind: TorchFileKind) -> None:
    """The records may unpack to at most MAX_INFLATION times the file (or INFLATION_FLOOR): torch
    unpacks a record to the size the directory declares before checking anything in it."""
    inflated = sum(i.file_size for i in infos)
    limit = max(MAX_INFLATION * size, INFLATION_FLOOR)
    if inflated <= limit:
        return
    largest = max(infos, key=lambda i: i.file_size)
    raise _refused(
        path,
        kind,
        f"its records would unpack to {inflated:,} bytes from a {size:,}-byte file, more than the {limit:,} "
        f"a {kind.what} this size can hold ({largest.filename}: {largest.file_size:,} bytes from "
        f"{largest.compress_size:,} stored)",
        [
            "a zip bomb: a small file crafted to fill memory when it is unpacked",
            "the file was re-zipped with compression (torch.save stores its records uncompressed)",
        ],
    )


def _count_pickle_ops(stream: IO[bytes], path: Path, size: int, kind: TorchFileKind) -> None:
    """Refuse a pickle of more than MAX_PICKLE_OPS operations before torch runs it: unpickling time
    and the objects it builds grow with its operations, not its bytes."""
    try:
        for count, _ in enumerate(pickletools.genops(stream)):
            if count >= MAX_PICKLE_OPS:
                raise _refused(
                    path,
                    kind,
                    f"its pickle runs more than {MAX_PICKLE_OPS:,} operations, far beyond what a {kind.what} needs",
                    ["a crafted file built to take minutes or gigabytes to unpickle"],
                )
    except ValueError as exc:  # an unknown opcode or a pickle cut short
        raise _unreadable(path, size, kind, exc) from None


# --- the pickle torch refused -----------------------------------------------------------------


def _refused_pickle(
    path: Path, size: int, kind: TorchFileKind, exc: pickle.UnpicklingError, pickle_name: str
) -> MiniGPTError:
    """torch's weights-only unpickler refused the file: say which globals and where they sit."""
    try:
        names = list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except (RuntimeError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError):
        names = []
    if not names:  # refused for its bytes, not for a global: no pickle at all
        return _unreadable(path, size, kind, exc)
    where = _refused_entries(path, pickle_name, names) or [", ".join(names[:5])]
    return _refused(
        path,
        kind,
        f"{', '.join(where)} {'is' if len(where) == 1 else 'are'} outside torch's weights-only allow-list: the file "
        "holds pickled Python objects, not just tensors and numbers. Unpickling them could run arbitrary code, "
        "so minigpt never loads such a file, even though torch could be told to.",
        list(kind.unsafe_causes),
    )


class _Stub:
    """Stands in for any global while locating refused ones: its methods only record, never run code."""

    name, refused = "", False
    parts: list

    def __new__(cls, *args: object, **kwargs: object) -> _Stub:
        obj = object.__new__(cls)
        obj.parts = [args, kwargs]
        return obj

    def __setstate__(self, state: object) -> None:
        self.parts.append(state)

    def __setitem__(self, key: object, value: object) -> None:
        self.parts.append({key: value})

    def append(self, value: object) -> None:
        self.parts.append(value)

    def extend(self, values: Iterable[object]) -> None:
        self.parts.extend(values)


class _LocatingUnpickler(pickle.Unpickler):
    def __init__(self, file: IO[bytes], refused: set[str]):
        super().__init__(file)
        self.refused = refused

    def find_class(self, module: str, name: str) -> type[_Stub]:
        full = f"{module}.{name}"
        return type("Stub", (_Stub,), {"name": full, "refused": full in self.refused})

    def persistent_load(self, pid: object) -> None:  # tensor storages: not needed to find the keys
        return None


def _refused_entries(path: Path, pickle_name: str, refused: list[str]) -> list[str]:
    """Where in the file the refused globals sit, e.g. `'config'['out_dir'] (pathlib.PosixPath)`.
    Reads the pickle (already measured by `_check_archive`) with stubs for every global, so nothing
    in it runs; empty when they cannot be located."""
    found: list[str] = []
    budget = [MAX_VALUES]  # shared references could make the walk exponential

    def walk(obj: object, where: str, depth: int = 0) -> None:
        budget[0] -= 1
        if depth > MAX_DEPTH or len(found) >= 10 or budget[0] < 0:
            return
        if isinstance(obj, _Stub):
            if obj.refused:
                found.append(f"{where or 'the top level'} ({obj.name})")
                return
            for part in obj.parts:
                walk(part, where, depth + 1)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                walk(value, f"{where}[{key!r}]" if where else repr(key), depth + 1)
        elif isinstance(obj, (list, tuple)):
            for i, value in enumerate(obj):
                walk(value, f"{where}[{i}]", depth + 1)

    try:
        with zipfile.ZipFile(path) as archive, archive.open(pickle_name) as stream:
            walk(_LocatingUnpickler(stream, set(refused)).load(), "")
    except (*_DAMAGED, OSError, zipfile.BadZipFile, pickle.UnpicklingError):
        return []
    return found


# --- what was loaded --------------------------------------------------------------------------


_CONTAINERS = (dict, list, tuple, set, frozenset)
_KEY = object()  # marks a dict key in a walk's path


def _check_loaded(data: object, path: Path, kind: TorchFileKind) -> None:
    """Walk what was loaded once, to MAX_DEPTH and MAX_VALUES, refusing a tensor whose storage is
    shorter than its shape and strides claim. Iterative: no depth reaches Python's recursion limit.
    A walk entry is (value, depth, its key, the parent's entry): names are only built to refuse."""
    stack: list[tuple] = [(data, 0, None, None)]
    seen = 0
    while stack:
        entry = stack.pop()
        obj, depth = entry[0], entry[1]
        if isinstance(obj, torch.Tensor):
            problem = _stored_short(obj)
            if problem:
                raise _refused(
                    path,
                    kind,
                    f"tensor {_where(entry) or '(top level)'} {problem}",
                    ["the file was crafted or edited", "saved from an expand()ed view instead of a tensor"],
                )
            continue
        if isinstance(obj, dict):  # keys too: a tuple key can nest as deep as a value
            keys = list(obj)
            children, names = keys + list(obj.values()), [_KEY] * len(keys) + keys
        elif isinstance(obj, _CONTAINERS):
            children = list(obj)
            names = list(range(len(children)))
        else:
            continue
        seen += len(children)
        if seen > MAX_VALUES:
            raise _refused(
                path,
                kind,
                f"walking what it holds visits more than {MAX_VALUES:,} values (values shared by reference "
                "count each time they appear)",
                [
                    "a crafted file whose shared references multiply its size",
                    "large Python values saved instead of tensors",
                ],
            )
        if children and depth >= MAX_DEPTH:
            raise _refused(
                path,
                kind,
                f"{_where(entry) or 'its top level'} nests more than {MAX_DEPTH} levels deep (or contains itself)",
                ["a crafted file built to exhaust the stack of whatever reads it"],
            )
        # an empty container has nothing to check: counted above, never pushed
        stack.extend((c, depth + 1, n, entry) for c, n in zip(children, names, strict=True) if _walked(c))


def _walked(value: object) -> bool:
    return isinstance(value, torch.Tensor) or (isinstance(value, _CONTAINERS) and len(value) > 0)


def _where(entry: tuple) -> str:
    """The dotted path of a walk entry (`model_state_dict.tok_emb.weight`), cut to its first 30 parts."""
    parts: list[str] = []
    while entry[3] is not None:
        parts.append("(a key)" if entry[2] is _KEY else _name(entry[2]))
        entry = entry[3]
    parts.reverse()
    return ".".join(parts[:30]) + (" ..." if len(parts) > 30 else "")


def _name(key: object) -> str:
    """A key as a path part; a key that is itself a container is named by its type (printing it
    could recurse as deep as it nests)."""
    return str(key)[:80] if isinstance(key, str | int | float | bool) or key is None else f"<{type(key).__name__}>"


def _stored_short(t: torch.Tensor) -> str | None:
    """Why `t`'s shape claims more than its storage holds, or None. Reads sizes only."""
    if t.numel() == 0 or t.layout != torch.strided:
        return None
    itemsize = t.element_size()
    stored = t.untyped_storage().nbytes()
    claimed = t.numel() * itemsize
    if claimed > stored:
        return (
            f"is an expanded view: its shape {tuple(t.shape)} claims {claimed:,} bytes and the file stores "
            f"{stored:,} (a stride of 0 repeats one element)"
        )
    last = t.storage_offset() + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))
    if (last + 1) * itemsize > stored:
        return f"reaches past the end of its storage ({(last + 1) * itemsize:,} bytes needed, {stored:,} stored)"
    return None
