"""What every tokenizer offers the rest of minigpt, whatever library is behind it.

`Tokenizer` is the one interface: `encode`, `decode`, `pieces` (an encoding token by token, each
with the bytes it stands for and its span in the UTF-8 text), `special_tokens`, `vocab_size` and a
`fingerprint` a checkpoint records. The backends are the character tokenizer (`tokenizer.py`) and
tiktoken, Hugging Face `tokenizer.json` and SentencePiece (`tokenizer_libs.py`); `tokenizer_load.py`
picks one from what the user named. No torch, no optional library imported here.
"""

from __future__ import annotations

import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from minigpt.errors import TokenizerError

EOT_NAMES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<|eot_id|>", "<eos>", "[SEP]")
BOS_NAMES = ("<|begin_of_text|>", "<s>", "<bos>", "[CLS]")


@dataclass(frozen=True)
class Piece:
    """One token of an encoding: its ID, the bytes it stands for, and where they sit in the text."""

    id: int
    data: bytes  # the token's bytes (a special token: its name in UTF-8)
    start: int  # byte offset in text.encode("utf-8")
    end: int
    special: bool = False

    @property
    def partial(self) -> bool:
        """Bytes that are no whole UTF-8 text: a byte-fallback token or part of a split character."""
        try:
            self.data.decode("utf-8")
        except UnicodeDecodeError:
            return True
        return False

    @property
    def label(self) -> str:
        return piece_label(self.data)


# whitespace as symbols of one cell each (so columns of pieces stay aligned): space ␣, newline ⏎, tab →
WHITESPACE_MARKS = {" ": "\u2423", "\n": "\u23ce", "\t": "\u2192", "\r": "\u240d"}


def visible(text: str) -> str:
    """Whitespace and control characters as symbols (space ␣, newline ⏎, tab →), so a token's
    leading space and a run of newlines can be seen."""
    out = []
    for c in text:
        if c in WHITESPACE_MARKS:
            out.append(WHITESPACE_MARKS[c])
        elif unicodedata.category(c) in ("Cc", "Cf", "Zs", "Zl", "Zp"):  # Zs: a no-break space is no blank
            out.append(f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
        else:
            out.append(c)
    return "".join(out)


def piece_label(data: bytes) -> str:
    """A token's bytes as every view shows them (the checks' messages, the Tokenizer pane, the
    Sampler's tables): text with its whitespace made visible (␣the), and each byte that is no
    whole UTF-8 character as <0xE2>, never U+FFFD: b" \\xe2" is "␣<0xE2>", not "<0x20><0xE2>"."""
    out = []
    while data:
        try:
            out.append(visible(data.decode("utf-8")))
            break
        except UnicodeDecodeError as exc:  # the text before the bad bytes, the bad bytes, then the rest
            out.append(visible(data[: exc.start].decode("utf-8")))
            out.append("".join(f"<0x{b:02X}>" for b in data[exc.start : exc.end]))
            data = data[exc.end :]
    return "".join(out)


def not_text(text: str) -> tuple[int, int]:
    """(replacement characters, control characters other than whitespace) in decoded text: what a
    decoding of IDs written by another tokenizer shows."""
    replacement = text.count("\ufffd")
    control = sum(1 for c in text if unicodedata.category(c) == "Cc" and c not in "\n\t\r")
    return replacement, control


class Tokenizer(ABC):
    """Text to IDs and back. `vocab_size` counts every ID `decode` accepts, special tokens included."""

    kind: str = ""  # "char", "tiktoken", "hf", "sentencepiece"
    path: str | None = None  # the file it was read from (None: built in memory or named)
    # decode(encode(text)) == text for any text: byte-level BPE promises it; a tokenizer that
    # normalises (SentencePiece's NFKC, lower-casing) or knows only some characters does not
    lossless: bool = True

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @property
    @abstractmethod
    def fingerprint(self) -> str: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str: ...

    @abstractmethod
    def token_bytes(self, id: int) -> bytes:
        """The bytes one ID stands for (a special token: its name)."""

    @property
    def name(self) -> str:
        """How messages name it: its file, or the encoding it was named by."""
        return self.path or self.kind

    @property
    def special_tokens(self) -> dict[str, int]:
        """Special (control) tokens by name: never produced from ordinary text."""
        return {}

    @property
    def eot_id(self) -> int | None:
        """The end-of-text token, where the tokenizer has one (GPT-2's <|endoftext|> 50256)."""
        return _first(self.special_tokens, EOT_NAMES)

    @property
    def bos_id(self) -> int | None:
        return _first(self.special_tokens, BOS_NAMES)

    def describe(self) -> str:
        """One line: the kind, the size and where it came from."""
        return f"{self.kind} tokenizer, {self.vocab_size:,} tokens ({self.name})"

    def encodable(self, text: str) -> str:
        """The part of `text` this tokenizer can encode (all of it, for any tokenizer that
        falls back to bytes or an unknown token)."""
        return text

    def pieces(self, text: str) -> list[Piece]:
        """`encode(text)` token by token. Spans are the tokens' bytes laid end to end, which is
        exact for a tokenizer that never changes the text; a normalising backend overrides it."""
        out, pos = [], 0
        specials = set(self.special_tokens.values())
        for i in self.encode(text):
            data = self.token_bytes(i)
            out.append(Piece(i, data, pos, pos + len(data), i in specials))
            pos += len(data)
        return out

    def token_label(self, id: int) -> str:
        """One ID as a readable label (`piece_label` of its bytes; a special token: its name)."""
        return piece_label(self.token_bytes(id))

    def check_ids(self, ids: list[int]) -> None:
        """Raise the typed error `decode` gives for IDs outside [0, vocab_size)."""
        n = self.vocab_size
        bad = [(pos, i) for pos, i in enumerate(ids) if not isinstance(i, int) or not 0 <= i < n]
        if bad:
            raise TokenizerError(
                f"{len(bad)} ID(s) outside the vocabulary [0, {n}): "
                + ", ".join(f"{i!r} at {pos}" for pos, i in bad[:5]),
                path=self.path,
                causes=["the IDs were encoded with another tokenizer", "the model's vocab_size is larger"],
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, fingerprint={self.fingerprint[:12]})"


def _first(special: dict[str, int], names: tuple[str, ...]) -> int | None:
    for name in names:
        if name in special:
            return special[name]
    return None


def id_list(ids: Iterable[int]) -> list[int]:
    """IDs as a list of ints (a tensor or an array too)."""
    if hasattr(ids, "tolist"):
        ids = ids.tolist()
    return list(ids)
