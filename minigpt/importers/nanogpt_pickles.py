"""nanoGPT's `meta.pkl` (its vocabulary) read without running its code: through an unpickler that
refuses every global. Its `ckpt.pt` is a torch file, read by `minigpt.io.torch_files`."""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import NoReturn

from minigpt.errors import DataError
from minigpt.io.files import stat_input

META_MAX_BYTES = 64 * 2**20  # a char-level meta.pkl is a few KB
# values and characters a plain pickle may hold once its shared references are followed: a pickle
# refers to one object many times for free, so a KB file can stand for 2**60 values, and comparing,
# hashing or printing it would never end
EXPANDED_MAX = 10_000_000


class UnsafePickleError(DataError):
    """A pickle asked for a Python global (class or function): unpickling it could run code."""

    def __init__(self, path: object, global_name: str):
        self.global_name = global_name
        super().__init__(
            f"Refused to load {path}: the pickle asks for the Python global {global_name!r}, and unpickling "
            "it could run code. A nanoGPT meta.pkl holds only a dict of strings and integers, so nothing "
            "in it was run.",
            path=path,
            causes=[
                "the file was replaced by a malicious or foreign pickle",
                "it was written by a modified prepare.py that pickles objects",
            ],
        )


class _PlainDataUnpickler(pickle.Unpickler):
    """Dicts, lists, tuples, str, bytes, numbers, bool and None need no globals; every global is refused."""

    def __init__(self, file: io.BytesIO, path: Path):
        super().__init__(file)
        self._path = path

    def find_class(self, module: str, name: str) -> NoReturn:
        raise UnsafePickleError(self._path, f"{module}.{name}")


def load_plain_pickle(path: str | os.PathLike) -> object:
    """Unpickle a file that must hold plain data only; never calls `pickle.load`."""
    path = Path(path)
    st = stat_input(path, "meta.pkl", error=DataError, missing=["--data-dir is nanoGPT's data/<dataset> folder"])
    if st.st_size > META_MAX_BYTES:
        raise DataError(f"Not a char-level meta.pkl: {path} is {st.st_size:,} bytes (expected a few KB)", path=path)
    try:
        value = _PlainDataUnpickler(io.BytesIO(path.read_bytes()), path).load()
    except UnsafePickleError:
        raise
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        IndexError,
        KeyError,
        TypeError,
        AttributeError,
        RecursionError,
    ) as exc:
        raise DataError(
            f"Not a readable meta.pkl: {path} ({type(exc).__name__}: {str(exc)[:200]})",
            path=path,
            causes=["the file is truncated or corrupt", "it is not a pickle"],
        ) from None
    if _expanded_size(value, EXPANDED_MAX) > EXPANDED_MAX:
        raise DataError(
            f"Not a plain-data pickle: {path} refers to the same values over and over, more than "
            f"{EXPANDED_MAX:,} values and characters once followed (reading it would never end)",
            path=path,
            causes=["the file was replaced by a foreign or hostile pickle"],
        )
    return value


def _expanded_size(value: object, limit: int) -> int:
    """Values and characters in `value` counted each time they are reached (a list referred to
    twice counts twice, as a comparison or a repr would visit it), worked out once per distinct
    object; past `limit`, and for a value that contains itself, the answer is `limit + 1`."""
    sizes: dict[int, int] = {}
    open_ids: set[int] = set()  # containers whose size is being summed (a cycle leads back to one)
    stack: list[tuple[object, bool]] = [(value, False)]
    keep: list[object] = []  # the objects measured stay alive, so their ids are not reused meanwhile
    while stack:
        item, children_done = stack.pop()
        key = id(item)
        if isinstance(item, (str, bytes, bytearray)):
            sizes[key] = 1 + len(item)
            keep.append(item)
            continue
        children = _children(item)
        if children_done:
            open_ids.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if key in sizes:
            continue
        if key in open_ids:
            return limit + 1  # a list that holds itself: endless once followed
        open_ids.add(key)
        keep.append(item)
        stack.append((item, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(value)]


def _children(item: object) -> list[object]:
    if isinstance(item, dict):
        return [*item.keys(), *item.values()]
    if isinstance(item, (list, tuple, set, frozenset)):
        return list(item)
    return []


def read_meta(path: str | os.PathLike) -> list[str]:
    """The characters of a nanoGPT char-level `meta.pkl`, in ID order (`itos[0]`, `itos[1]`, ...)."""
    try:
        return _read_meta(path)
    except RecursionError:  # lists nested 200,000 deep load fine but cannot be compared or shown
        raise DataError(
            f"Not a char-level nanoGPT meta.pkl: {path} holds values nested too deeply to read",
            path=path,
            causes=["the file was replaced by a foreign or hostile pickle"],
        ) from None


def _read_meta(path: str | os.PathLike) -> list[str]:
    meta = load_plain_pickle(path)

    def bad(what: str) -> DataError:
        return DataError(
            f"Not a char-level nanoGPT meta.pkl: {path} {what}",
            path=path,
            causes=["written by another prepare.py (BPE runs have no meta.pkl)", "a hand-edited file"],
        )

    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict):
        found = f"keys {sorted(map(str, meta))[:8]}" if isinstance(meta, dict) else type(meta).__name__
        raise bad(f"should be a dict with an 'itos' dict; found {found}")
    itos = meta["itos"]
    if set(itos) != set(range(len(itos))):
        raise bad(f"'itos' keys should be the IDs 0..{len(itos) - 1}; found {sorted(map(repr, itos))[:6]}")
    chars = [itos[i] for i in range(len(itos))]
    if not all(isinstance(c, str) and len(c) == 1 for c in chars):
        raise bad(f"'itos' should map IDs to single characters; found {[c for c in chars if len(str(c)) != 1][:5]!r}")
    if meta.get("vocab_size", len(chars)) != len(chars):
        raise bad(f"says vocab_size {meta.get('vocab_size')!r} but 'itos' has {len(chars)} characters")
    stoi = meta.get("stoi")
    if stoi is not None and stoi != {c: i for i, c in enumerate(chars)}:
        raise bad("has 'stoi' and 'itos' that are not inverses of each other")
    return chars
