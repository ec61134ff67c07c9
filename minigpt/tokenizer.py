"""Character-level tokenizer in the `{"chars": [...]}` layout of the usual MiniGPT recipe."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import TokenizerError, UnknownCharactersError
from .fileio import atomic_write_text, lfs_pointer_message, os_error, stat_input


def fingerprint_chars(chars: Sequence[str]) -> str:
    """SHA-256 of the compact JSON of `chars`: the definition users' existing files use."""
    payload = json.dumps(list(chars), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class CharTokenizer:
    def __init__(self, chars: Sequence[str], *, path: str | None = None):
        chars = list(chars)
        if not chars:
            raise TokenizerError(
                f'Empty tokenizer: {path or "the vocabulary"} has no characters (an empty "chars" list)',
                path=path,
                causes=["the tokenizer was built from empty text", "an interrupted or hand-edited file"],
            )
        bad = [c for c in chars if not isinstance(c, str) or len(c) != 1]
        if bad:
            raise TokenizerError(
                f"Tokenizer vocabulary must hold single characters; found {bad[:5]!r}",
                path=path,
                causes=["the file is a word- or BPE-level vocabulary, not a character one"],
            )
        if len(set(chars)) != len(chars):
            dupes = sorted(c for c, n in Counter(chars).items() if n > 1)
            raise TokenizerError(
                f"Tokenizer vocabulary repeats characters: {dupes[:10]!r} each appear more than once, so two "
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
        stat_input(path, "Tokenizer file", error=TokenizerError, missing=missing)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise os_error(exc, path, action="read") from None
        if not raw.strip():
            raise TokenizerError(f"Not a tokenizer: {path} is empty (an interrupted save?)", path=path)
        lfs = lfs_pointer_message(path, raw, len(raw))
        if lfs:
            raise TokenizerError(f"Not a tokenizer: {lfs}", path=path)
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise TokenizerError(
                f"Not a tokenizer: {path} is not valid UTF-8 JSON ({exc})",
                path=path,
                causes=["the file was truncated", "it is another kind of file"],
            ) from None
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
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = list(ids)
        n = len(self.chars)
        bad = [(pos, i) for pos, i in enumerate(ids) if not isinstance(i, int) or not 0 <= i < n]
        if bad:
            raise TokenizerError(
                f"{len(bad)} ID(s) outside the vocabulary [0, {n}): "
                + ", ".join(f"{i!r} at {pos}" for pos, i in bad[:5]),
                path=self.path,
                causes=["the IDs were encoded with another tokenizer", "the model's vocab_size is larger"],
            )
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"
