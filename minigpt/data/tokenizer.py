"""Character-level tokenizer in the `{"chars": [...]}` layout of the usual MiniGPT recipe."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from minigpt.data.tokenizer_api import Tokenizer, id_list
from minigpt.errors import TokenizerError, UnknownCharactersError
from minigpt.io.atomic import atomic_write_text
from minigpt.io.files import lfs_pointer_message, os_error, stat_input
from minigpt.io.jsonsafe import parse_json, utf8_text

MAX_TOKENIZER_BYTES = 64 * 2**20  # every Unicode character, escaped and indented, is ~15 MB


def fingerprint_chars(chars: Sequence[str]) -> str:
    """SHA-256 of the compact JSON of `chars`: the definition users' existing files use."""
    payload = json.dumps(list(chars), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _surrogate(c: object) -> bool:
    return isinstance(c, str) and len(c) == 1 and 0xD800 <= ord(c) <= 0xDFFF


class CharTokenizer(Tokenizer):
    """One ID per character: lossless on the characters it knows, an error on any other."""

    kind = "char"

    def __init__(self, chars: Sequence[str], *, path: str | None = None):
        chars = list(chars)
        where = f" in {path}" if path else ""
        if not chars:
            raise TokenizerError(
                f'Empty tokenizer: {path or "the vocabulary"} has no characters (an empty "chars" list)',
                path=path,
                causes=["the tokenizer was built from empty text", "an interrupted or hand-edited file"],
            )
        bad = [(i, c) for i, c in enumerate(chars) if not isinstance(c, str) or len(c) != 1]
        if bad:
            shown = ", ".join(f"chars[{i}] = {str(c)[:40]!r} ({type(c).__name__})" for i, c in bad[:5])
            raise TokenizerError(
                f"Tokenizer vocabulary{where} must hold single characters (strings of length 1); found {shown}",
                path=path,
                causes=["the file is a word- or BPE-level vocabulary, not a character one", "a hand-edited file"],
            )
        lone = [(i, c) for i, c in enumerate(chars) if _surrogate(c)]
        if lone:
            shown = ", ".join(f"chars[{i}] = U+{ord(c):04X}" for i, c in lone[:5])
            raise TokenizerError(
                f"Tokenizer vocabulary{where} holds lone UTF-16 surrogates ({shown}): they are not text and "
                "cannot be written as UTF-8, so no checkpoint or tokenizer file could be saved with them",
                path=path,
                causes=["the file was written with \\udXXX escapes by a buggy script", "a hand-edited file"],
            )
        if len(set(chars)) != len(chars):
            dupes = sorted(c for c, n in Counter(chars).items() if n > 1)
            raise TokenizerError(
                f"Tokenizer vocabulary{where} repeats characters: {dupes[:10]!r} each appear more than once, so two "
                "IDs would decode to the same character and encoding could not be undone",
                path=path,
                causes=["a hand-edited or merged vocabulary", "a vocabulary built by a buggy script"],
            )
        self.chars = chars
        self.path = path
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str | Iterable[str]) -> CharTokenizer:
        if isinstance(text, str):
            return cls(sorted(set(text)))
        vocab: set[str] = set()
        for part in text:
            vocab.update(part)
        return cls(sorted(vocab))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> CharTokenizer:
        path = Path(path)
        missing = ["run `minigpt prepare` first", "pass --tokenizer or --workspace"]
        st = stat_input(path, "Tokenizer file", error=TokenizerError, missing=missing)
        if st.st_size > MAX_TOKENIZER_BYTES:
            raise TokenizerError(
                f"Not a char tokenizer: {path} is {st.st_size:,} bytes; a character vocabulary (at most every "
                f"Unicode character) is under {MAX_TOKENIZER_BYTES // 2**20} MiB",
                path=path,
                causes=["it is another kind of file", "a word- or BPE-level vocabulary"],
            )
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise os_error(exc, path, action="read") from None
        if not raw.strip():
            raise TokenizerError(f"Not a tokenizer: {path} is empty (an interrupted save?)", path=path)
        lfs = lfs_pointer_message(path, raw, len(raw))
        if lfs:
            raise TokenizerError(f"Not a tokenizer: {lfs}", path=path)
        text = utf8_text(raw, path=path, error=TokenizerError, lead="Not a tokenizer: ")  # a BOM accepted
        data = parse_json(text, path=path, error=TokenizerError, what="a tokenizer", lead="Not a tokenizer: ")
        if not isinstance(data, dict) or not isinstance(data.get("chars"), list):
            found = type(data).__name__ if not isinstance(data, dict) else f"keys {sorted(data)[:8]}"
            raise TokenizerError(
                f'Not a char tokenizer: {path} must be a JSON object with a "chars" list; found {found}',
                path=path,
                causes=["a Hugging Face tokenizer.json or a stoi/itos mapping, not the char layout"],
            )
        return cls(data["chars"], path=str(path))

    def to_json(self) -> str:
        """The file's text: `chars` plus `vocab_size` and `fingerprint` for people reading it."""
        payload = {"chars": self.chars, "vocab_size": self.vocab_size, "fingerprint": self.fingerprint}
        return json.dumps(payload, ensure_ascii=False, indent=1) + "\n"

    def save(self, path: str | os.PathLike) -> None:
        atomic_write_text(self.to_json(), path)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    @property
    def fingerprint(self) -> str:
        return fingerprint_chars(self.chars)

    def unknown_chars(self, text: str) -> dict[str, list[int]]:
        unknown: dict[str, list[int]] = {}
        for pos, ch in enumerate(text):
            if ch not in self.stoi:
                unknown.setdefault(ch, []).append(pos)
        return unknown

    def encode(self, text: str) -> list[int]:
        stoi = self.stoi
        try:
            return [stoi[c] for c in text]
        except KeyError:
            raise UnknownCharactersError(self.unknown_chars(text), path=self.path) from None

    def decode(self, ids: Iterable[int]) -> str:
        ids = id_list(ids)
        self.check_ids(ids)
        return "".join(self.chars[i] for i in ids)

    def token_bytes(self, id: int) -> bytes:
        return self.chars[id].encode("utf-8")

    def encodable(self, text: str) -> str:
        return "".join(c for c in text if c in self.stoi)

    def describe(self) -> str:
        return f"char tokenizer, {self.vocab_size} characters ({self.name})"

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"
