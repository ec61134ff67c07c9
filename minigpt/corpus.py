"""Reading corpus text and splitting it into train/val/test.

Three kinds of source (see `load_source`):

- a WikiText-2 folder: `wiki.{train,valid,test}.tokens`, or the raw release's
  `wiki.{train,valid,test}.raw`; `valid` becomes the `val` split;
- a single text file, split at line boundaries (see `SPLIT_POLICY`);
- the literal `demo`: Python's own documentation (`pydoc_data.topics`), which every Python
  install carries, so the demo needs no download.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import DataError
from .workspace import SPLITS

DECODING_POLICY = (
    "bytes are decoded as strict UTF-8; a UTF-8 BOM at the start of a file is dropped; "
    "CRLF and lone CR become LF; invalid UTF-8 or an empty source is an error"
)
SPLIT_FRACTIONS = (0.90, 0.05, 0.05)  # train, val, test, by characters
SPLIT_POLICY = (
    "a single file (and the demo) is cut at the line starts nearest 90% and 95% of its "
    "characters: train/val/test = 90/5/5, each a run of whole lines, in file order"
)
WIKITEXT_NAMES = {"train": "train", "val": "valid", "test": "test"}  # our split -> file part
WIKITEXT_SUFFIXES = (".tokens", ".raw")
DEMO = "demo"

_UTF8_BOM = b"\xef\xbb\xbf"
_NEWLINES = re.compile(r"\r\n?")


@dataclass
class Corpus:
    """Text of the three splits and where it came from."""

    kind: str  # "wikitext", "text-file" or "demo"
    source: str  # what the user passed
    files: list[str]  # files read (empty for the demo)
    splits: dict[str, str] = field(default_factory=dict)  # split -> text


def decode_text(data: bytes, path: object = "<bytes>") -> str:
    """Decode `data` under `DECODING_POLICY`; `path` only names the file in errors."""
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.end]
        context = data[max(0, exc.start - 20) : exc.start]
        raise DataError(
            f"Not UTF-8 text: {path} has invalid byte(s) {bad!r} at byte offset {exc.start} "
            f"(after {context!r}): {exc.reason}",
            path=path,
            causes=[
                "the file is in another encoding (Latin-1, cp1252, UTF-16): re-save it as UTF-8",
                "it is a binary file",
                "it was truncated mid-character",
            ],
        ) from None
    return _NEWLINES.sub("\n", text)


def read_text(path: str | os.PathLike) -> str:
    """Read one file under `DECODING_POLICY`; an empty file is a `DataError`."""
    path = Path(path)
    if not path.exists():
        raise DataError(
            f"Corpus file not found: {path}",
            path=path,
            causes=["a typo in --source", "a relative path run from another folder"],
        )
    if not path.is_file():
        raise DataError(f"Not a corpus file: {path} is not a regular file", path=path)
    text = decode_text(path.read_bytes(), path)
    if not text:
        raise DataError(
            f"Empty corpus: {path} holds no text (0 characters after decoding)",
            path=path,
            causes=["an interrupted download or copy"],
        )
    return text


def split_lines(
    text: str, fractions: tuple[float, float, float] = SPLIT_FRACTIONS, *, source: object = "<text>"
) -> dict[str, str]:
    """Cut `text` into train/val/test at the line starts nearest the cumulative `fractions`.

    Every split is a non-empty run of whole lines, and train + val + test == text.
    """
    # a line starts at 0 and after every "\n" that is not the last character
    starts = [0] + [m.end() for m in re.finditer("\n", text) if m.end() < len(text)]
    if len(starts) < 3:
        raise DataError(
            f"Too little text to split: {source} has {len(starts)} line(s); train, val and test "
            "each need at least one whole line",
            path=source,
            causes=["a file with no line breaks: add them, or pass a WikiText-2 folder"],
        )

    def nearest(target: float, lo: int, hi: int) -> int:
        i = bisect.bisect_left(starts, target)
        if i > 0 and (i == len(starts) or target - starts[i - 1] <= starts[i] - target):
            i -= 1
        return min(max(i, lo), hi)

    n = len(text)
    i1 = nearest(n * fractions[0], 1, len(starts) - 2)
    i2 = nearest(n * (fractions[0] + fractions[1]), i1 + 1, len(starts) - 1)
    c1, c2 = starts[i1], starts[i2]
    return {"train": text[:c1], "val": text[c1:c2], "test": text[c2:]}


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


def load_source(source: str | os.PathLike) -> Corpus:
    """Read `source` (a WikiText-2 folder, a text file or `demo`) into a `Corpus`."""
    if str(source) == DEMO:
        return Corpus("demo", DEMO, [], split_lines(demo_text(), source="the demo corpus"))
    path = Path(source).expanduser()
    if path.is_dir():
        files = find_wikitext_files(path)
        splits = {s: read_text(files[s]) for s in SPLITS}
        return Corpus("wikitext", str(source), [str(files[s]) for s in SPLITS], splits)
    text = read_text(path)
    return Corpus("text-file", str(source), [str(path)], split_lines(text, source=path))
