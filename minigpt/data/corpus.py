"""Reading corpus text and splitting it into train/val/test.

Three kinds of source (see `open_source`, and `load_source` for small texts held in memory):

- a WikiText-2 folder: `wiki.{train,valid,test}.tokens`, or the raw release's
  `wiki.{train,valid,test}.raw`; `valid` becomes the `val` split;
- a single text file, split at line boundaries (see `SPLIT_POLICY`);
- the literal `demo`: Python's own documentation (`pydoc_data.topics`), which every Python
  install carries, so the demo needs no download.

Files are read in pieces (`iter_file_text`), never whole: `prepare` streams a corpus of any size.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from minigpt.errors import DataError
from minigpt.io.files import os_error, stat_input
from minigpt.io.workspace import SPLITS

DECODING_POLICY = (
    "bytes are decoded as strict UTF-8; a UTF-8 BOM at the start of a file is dropped; "
    "CRLF and lone CR become LF; invalid UTF-8 or an empty source is an error"
)
SPLIT_FRACTIONS = (0.90, 0.05, 0.05)  # train, val, test, by characters
SPLIT_POLICY = (
    "a single file (and the demo) is cut at the line starts nearest 90% and 95% of its "
    "characters: train/val/test = 90/5/5, each a run of whole lines, in file order; a text "
    "with fewer than 3 lines is cut inside a line at those characters, with a notice"
)
WIKITEXT_NAMES = {"train": "train", "val": "valid", "test": "test"}  # our split -> file part
WIKITEXT_SUFFIXES = (".tokens", ".raw")
DEMO = "demo"
# warnings a workspace of the demo corpus always gets, and why they are no fault of the user's:
# the CLI and the terminal UI both say these words
DEMO_EXPECTED = {
    "split_overlap": "expected for the demo corpus: Python's documentation repeats passages across "
    "topics, so its test split shares text with train (your own data should not)",
}
CHUNK_BYTES = 4 << 20  # bytes decoded at a time: bounds memory whatever the corpus size

_UTF8_BOM = b"\xef\xbb\xbf"
_NEWLINES = re.compile(r"\r\n?")


@dataclass
class Corpus:
    """Text of the three splits and where it came from (small sources, held in memory)."""

    kind: str  # "wikitext", "text-file" or "demo"
    source: str  # what the user passed
    files: list[str]  # files read (empty for the demo)
    splits: dict[str, str] = field(default_factory=dict)  # split -> text
    notices: list[str] = field(default_factory=list)  # e.g. a cut inside a line


@dataclass(frozen=True)
class TextSource:
    """Text that can be read more than once, in pieces (a file, or the demo string)."""

    name: str  # what errors call it: a path or "the demo corpus"
    read: Callable[[], Iterator[str]]  # a fresh iterator of decoded pieces per call
    size: int  # bytes of the file (characters for the demo): for progress, >= the characters


@dataclass(frozen=True)
class SourcePlan:
    """What `open_source` found: one text per split (WikiText) or one text to cut (`whole`)."""

    kind: str  # "wikitext", "text-file" or "demo"
    source: str
    files: list[str]
    per_split: dict[str, TextSource] | None  # WikiText: split -> its file
    whole: TextSource | None  # a single file or the demo, cut by `choose_cuts`


def _decode(data: bytes, path: object, base: int, before: bytes = b"") -> str:
    """Strict UTF-8; `base` is the byte offset of `data` in the file and `before` the bytes just
    ahead of it, both for the error message."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.end]
        context = (before + data[: exc.start])[-20:]
        raise DataError(
            f"Not UTF-8 text: {path} has invalid byte(s) {bad!r} at byte offset {base + exc.start} "
            f"(after {context!r}): {exc.reason}",
            path=path,
            causes=[
                "the file is in another encoding (Latin-1, cp1252, UTF-16): re-save it as UTF-8",
                "it is a binary file",
                "it was truncated mid-character",
            ],
        ) from None


def decode_text(data: bytes, path: object = "<bytes>") -> str:
    """Decode `data` under `DECODING_POLICY`; `path` only names the file in errors."""
    skip = len(_UTF8_BOM) if data.startswith(_UTF8_BOM) else 0
    return _NEWLINES.sub("\n", _decode(data[skip:], path, skip))


def _utf8_cut(data: bytes) -> int:
    """Where to cut `data` so no multi-byte character is split (its incomplete tail stays behind)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # ASCII or the lead byte of a sequence
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return len(data) - back if need > back else len(data)
    return len(data)


def iter_file_text(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES) -> Iterator[str]:
    """Decoded pieces of `path` under `DECODING_POLICY`, about `chunk_bytes` each.

    The same text as `decode_text` of the whole file: a character split across blocks and a
    CRLF split across blocks are joined first. Errors name the byte offset in the file.
    """
    path = Path(path)
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    with fh:
        offset, pending, held_cr, first, before = 0, b"", False, True, b""
        while True:
            try:
                block = fh.read(chunk_bytes)
            except OSError as exc:
                raise os_error(exc, path, action="read") from None
            final = not block
            data = pending + block
            if first and (len(data) >= len(_UTF8_BOM) or final):
                first = False
                if data.startswith(_UTF8_BOM):
                    data, offset = data[len(_UTF8_BOM) :], len(_UTF8_BOM)
            elif first:
                pending = data
                continue
            cut = len(data) if final else _utf8_cut(data)
            text = _decode(data[:cut], path, offset, before)
            offset, pending, before = offset + cut, data[cut:], (before + data[:cut])[-20:]
            if held_cr:
                text = "\r" + text
            held_cr = not final and text.endswith("\r")  # maybe the first half of a CRLF
            if held_cr:
                text = text[:-1]
            if "\r" in text:
                text = _NEWLINES.sub("\n", text)
            if text:
                yield text
            if final:
                return


def _check_file(path: Path) -> int:
    st = stat_input(
        path, "Corpus file", error=DataError, missing=["a typo in --source", "a relative path run from another folder"]
    )
    return st.st_size


def read_text(path: str | os.PathLike) -> str:
    """Read one (small) file under `DECODING_POLICY`; an empty file is a `DataError`."""
    path = Path(path)
    _check_file(path)
    text = "".join(iter_file_text(path))
    if not text:
        raise empty_corpus(path)
    return text


def empty_corpus(path: object) -> DataError:
    return DataError(
        f"Empty corpus: {path} holds no text (0 characters after decoding)",
        path=path,
        causes=["an interrupted download or copy"],
    )


# -- where to cut a single text ---------------------------------------------------------------


class LineStarts:
    """The few line starts that `choose_cuts` can pick, collected from a text of `n` characters
    read in pieces (`feed` each piece in order).

    A line starts at 0 and after every "\\n" that is not the text's last character. Kept: the
    first 3 and last 3 starts, and the 2 nearest on each side of every target, which is all the
    nearest-start search and its clamps look at; `count` is the number of all starts.
    """

    def __init__(self, n: int, targets: Iterable[float]):
        self.n = n
        self.targets = [int(t) for t in targets]  # floor: a start s <= t iff s <= floor(t)
        self.count = 1 if n else 0
        self._first, self._last = [0], [0]
        self._below = {t: [0] for t in self.targets}  # the two largest starts <= t
        self._above: dict[int, list[int]] = {t: [] for t in self.targets}  # the two smallest > t
        self._pos = 0

    def _forward(self, piece: str, a: int, lo: int, k: int) -> list[int]:
        """Up to `k` starts after "\\n"s at piece[lo:], ascending."""
        out: list[int] = []
        i = lo - 1
        while len(out) < k and (i := piece.find("\n", i + 1)) != -1 and a + i + 1 < self.n:
            out.append(a + i + 1)
        return out

    def _backward(self, piece: str, a: int, hi: int, k: int) -> list[int]:
        """Up to `k` starts after "\\n"s at piece[:hi], ascending."""
        out: list[int] = []
        j = hi
        while len(out) < k and j > 0 and (j := piece.rfind("\n", 0, j)) != -1:
            if a + j + 1 < self.n:
                out.append(a + j + 1)
        return out[::-1]

    def feed(self, piece: str) -> None:
        a = self._pos
        self._pos += len(piece)
        newlines = piece.count("\n")
        if not newlines:
            return
        self.count += newlines - (self._pos == self.n and piece.endswith("\n"))
        if len(self._first) < 3:
            self._first += self._forward(piece, a, 0, 3 - len(self._first))
        self._last = (self._last + self._backward(piece, a, len(piece), 3))[-3:]
        for t in self.targets:
            if t - a > 0:
                self._below[t] = (self._below[t] + self._backward(piece, a, min(len(piece), t - a), 2))[-2:]
            if len(self._above[t]) < 2 and self._pos > t:
                self._above[t] += self._forward(piece, a, max(0, t - a), 2 - len(self._above[t]))

    def starts(self) -> list[int]:
        """The kept starts, sorted: a subset of all starts holding every one a cut can use."""
        kept = set(self._first) | set(self._last)
        for t in self.targets:
            kept.update(self._below[t], self._above[t])
        return sorted(kept)


def choose_cuts(
    n: int, starts: list[int], count: int, fractions: tuple[float, float, float] = SPLIT_FRACTIONS, *, source: object
) -> tuple[int, int, str | None]:
    """Character positions (c1, c2) cutting a text of `n` characters into train/val/test.

    `starts` holds the line starts near the targets (all of them, or what `LineStarts` kept)
    and `count` how many line starts the text has. With 3 or more lines, each split is a
    non-empty run of whole lines at the starts nearest the cumulative `fractions`; with fewer,
    the cuts fall inside a line, at those characters, and the third value is the notice saying so.
    """
    t1, t2 = n * fractions[0], n * (fractions[0] + fractions[1])
    if count < 3:
        if n < 3:
            raise DataError(
                f"Too little text to split: {source} has {n} character(s); train, val and test each need at least one",
                path=source,
                causes=["an almost empty file", "pass a WikiText-2 folder with its own splits"],
            )
        c1 = min(max(round(t1), 1), n - 2)
        c2 = min(max(round(t2), c1 + 1), n - 1)
        notice = (
            f"{source} has only {count} line(s), so train/val/test were cut inside a line at characters "
            f"{c1:,} and {c2:,} (90/5/5 by characters)"
        )
        return c1, c2, notice

    def nearest(target: float, lo: int, hi: int) -> int:
        i = bisect.bisect_left(starts, target)
        if i > 0 and (i == len(starts) or target - starts[i - 1] <= starts[i] - target):
            i -= 1
        return min(max(i, lo), hi)

    i1 = nearest(t1, 1, len(starts) - 2)
    i2 = nearest(t2, i1 + 1, len(starts) - 1)
    return starts[i1], starts[i2], None


def split_text(
    text: str, fractions: tuple[float, float, float] = SPLIT_FRACTIONS, *, source: object = "<text>"
) -> tuple[dict[str, str], str | None]:
    """`text` cut into train/val/test at the line starts nearest the cumulative `fractions` (see
    `choose_cuts`), and the notice of a cut inside a line. Every split is non-empty and
    train + val + test == text; each is a run of whole lines when the text has at least 3."""
    starts = [0] + [m.end() for m in re.finditer("\n", text) if m.end() < len(text)] if text else []
    c1, c2, notice = choose_cuts(len(text), starts, len(starts), fractions, source=source)
    return {"train": text[:c1], "val": text[c1:c2], "test": text[c2:]}, notice


# -- sources ----------------------------------------------------------------------------------


def demo_text() -> str:
    """Python's documentation topics (`pydoc_data.topics`), concatenated in sorted key order.

    About 460 KB of English prose and code that every Python install carries; deterministic
    for a given Python version.
    """
    from pydoc_data.topics import topics

    text = "".join(t if t.endswith("\n") else t + "\n" for _, t in sorted(topics.items()))
    return _NEWLINES.sub("\n", text)


def find_wikitext_files(folder: Path) -> dict[str, Path]:
    """Split -> file for a WikiText-2 folder (`.tokens` preferred over `.raw`)."""
    found: dict[str, Path] = {}
    for suffix in WIKITEXT_SUFFIXES:
        files = {s: folder / f"wiki.{part}{suffix}" for s, part in WIKITEXT_NAMES.items()}
        present = {s: p for s, p in files.items() if p.is_file()}
        if len(present) == len(files):
            return files
        if present and not found:
            found = present
    expected = ", ".join(f"wiki.{p}{{.tokens|.raw}}" for p in WIKITEXT_NAMES.values())
    what = ("only " + ", ".join(p.name for p in found.values())) if found else "none of them"
    raise DataError(
        f"Not a WikiText-2 folder: {folder} should hold {expected}; found {what}",
        path=folder,
        causes=["an incomplete download or unzip", "the parent folder of the corpus was passed"],
    )


def _file_source(path: Path) -> TextSource:
    return TextSource(str(path), lambda: iter_file_text(path, CHUNK_BYTES), _check_file(path))


def open_source(source: str | os.PathLike) -> SourcePlan:
    """Find what `source` (a WikiText-2 folder, a text file or `demo`) holds, reading no text yet."""
    if str(source) == DEMO:
        text = demo_text()
        return SourcePlan("demo", DEMO, [], None, TextSource("the demo corpus", lambda: iter((text,)), len(text)))
    path = Path(source).expanduser()
    if path.is_dir():
        files = find_wikitext_files(path)
        per_split = {s: _file_source(files[s]) for s in SPLITS}
        return SourcePlan("wikitext", str(source), [str(files[s]) for s in SPLITS], per_split, None)
    return SourcePlan("text-file", str(source), [str(path)], None, _file_source(path))


def load_source(source: str | os.PathLike) -> Corpus:
    """Read `source` (a WikiText-2 folder, a text file or `demo`) into a `Corpus` held in memory
    (for small texts; `prepare` streams instead)."""
    plan = open_source(source)
    if plan.per_split is not None:
        splits = {s: "".join(plan.per_split[s].read()) for s in SPLITS}
        for s in SPLITS:
            if not splits[s]:
                raise empty_corpus(plan.per_split[s].name)
        return Corpus(plan.kind, plan.source, plan.files, splits)
    assert plan.whole is not None
    text = "".join(plan.whole.read())
    if not text:
        raise empty_corpus(plan.whole.name)
    splits, notice = split_text(text, source=plan.whole.name)
    return Corpus(plan.kind, plan.source, plan.files, splits, [notice] if notice else [])
