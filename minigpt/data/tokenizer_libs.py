"""The tokenizers people train with, behind `Tokenizer`: tiktoken encodings (GPT-2's BPE and
OpenAI's later ones), Hugging Face `tokenizer.json` (the `tokenizers` library) and SentencePiece
`.model` files. Each library is imported when its backend is built, never before: the CLI's
`--help` and the UI's first paint do not pay for them (`pip install minigpt-tui[tokenizers]`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from minigpt.data.tokenizer_api import Piece, Tokenizer, id_list
from minigpt.data.tokenizer_files import (
    library_panics,
    library_refusals,
    read_tiktoken_ranks,
    read_tokenizer_file,
)
from minigpt.errors import TokenizerError
from minigpt.io.jsonsafe import parse_json, utf8_text

ENDOFTEXT = "<|endoftext|>"
# GPT-2's pre-tokenizer split (tiktoken's r50k pattern; Hugging Face's ByteLevel uses the same)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# special tokens of the encodings tiktoken ships, for a `.tiktoken` ranks file named after one
# (the file holds the ranks only)
KNOWN_SPECIALS = {
    "gpt2": {ENDOFTEXT: 50256},
    "r50k_base": {ENDOFTEXT: 50256},
    "p50k_base": {ENDOFTEXT: 50256},
    "cl100k_base": {
        ENDOFTEXT: 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {ENDOFTEXT: 199999, "<|endofprompt|>": 200018},
}
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _missing_library(package: str, path: object) -> TokenizerError:
    return TokenizerError(
        f"{path}: reading this tokenizer needs the `{package}` library, which is not installed",
        path=path if isinstance(path, (str, os.PathLike)) else None,
        causes=[f"pip install {package}  (or: pip install 'minigpt-tui[tokenizers]')"],
    )


# -- tiktoken -------------------------------------------------------------------------------------


class TiktokenTokenizer(Tokenizer):
    """A `tiktoken.Encoding`: byte-level BPE, lossless on any text."""

    kind = "tiktoken"
    lossless = True

    def __init__(self, encoding: Any, *, path: str | None = None, label: str | None = None):
        self.encoding = encoding
        self.path = path
        self.label = label or f"tiktoken:{encoding.name}"

    @classmethod
    def named(cls, name: str) -> TiktokenTokenizer:
        """`tiktoken:NAME`: the encoding from tiktoken's cache (downloaded on first use)."""
        try:
            import tiktoken
        except ImportError:
            raise _missing_library("tiktoken", f"tiktoken:{name}") from None
        try:
            encoding = tiktoken.get_encoding(name)
        except ValueError:
            raise TokenizerError(
                f"tiktoken:{name}: no such encoding; tiktoken knows {', '.join(tiktoken.list_encoding_names())}",
                causes=["a typo in the name", "a .tiktoken ranks file is given by its path, not by tiktoken:NAME"],
            ) from None
        except OSError as exc:  # requests' errors are OSErrors: no network and nothing in the cache
            cache = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
            where = f"TIKTOKEN_CACHE_DIR={cache}" if cache else "TIKTOKEN_CACHE_DIR is not set"
            raise TokenizerError(
                f"tiktoken:{name}: the encoding's files are not in tiktoken's cache ({where}) and downloading "
                f"them failed ({type(exc).__name__})",
                causes=[
                    "this machine has no network: on one that has, run "
                    f"`TIKTOKEN_CACHE_DIR=DIR python -c \"import tiktoken; tiktoken.get_encoding('{name}')\"`, "
                    "copy DIR here and set TIKTOKEN_CACHE_DIR to it",
                    "or pass the encoding's .tiktoken ranks file (or a tokenizer.json) by its path",
                ],
            ) from None
        return cls(encoding, label=f"tiktoken:{name}")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> TiktokenTokenizer:
        """A `.tiktoken` ranks file (base64 token, space, rank per line). The file holds no split
        pattern nor special tokens: those of the encoding it is named after (gpt2.tiktoken,
        cl100k_base.tiktoken ...), else GPT-2's pattern and <|endoftext|> after the last rank."""
        try:
            import tiktoken
        except ImportError:
            raise _missing_library("tiktoken", path) from None
        path = Path(path)
        stem = path.name.split(".")[0]
        # checked before tiktoken sees them: a duplicate rank or a missing byte makes it panic
        ranks = read_tiktoken_ranks(path, reserved=KNOWN_SPECIALS.get(stem))
        specials = KNOWN_SPECIALS.get(stem) or {ENDOFTEXT: max(ranks.values()) + 1}
        pattern = _known_pattern(stem)
        with library_panics(path, "tiktoken"):
            encoding = tiktoken.Encoding(stem, pat_str=pattern, mergeable_ranks=ranks, special_tokens=specials)
        return cls(encoding, path=str(path), label=str(path))

    @property
    def name(self) -> str:
        return self.label

    @functools.cached_property
    def vocab_size(self) -> int:
        return int(self.encoding.n_vocab)

    @functools.cached_property
    def special_tokens(self) -> dict[str, int]:
        return {s: self.encoding.encode_single_token(s) for s in sorted(self.encoding.special_tokens_set)}

    @functools.cached_property
    def ranks(self) -> dict[bytes, int]:
        """Every ordinary token's bytes and rank, through tiktoken's public calls."""
        enc = self.encoding
        return {b: enc.encode_single_token(b) for b in enc.token_byte_values()}

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of the ranks and special tokens: the same for an encoding named or read from a file."""
        h = hashlib.sha256(b"bpe-ranks\n")
        for data, rank in sorted(self.ranks.items(), key=lambda kv: kv[1]):
            h.update(b"%d %s\n" % (rank, base64.b64encode(data)))
        h.update(json.dumps(self.special_tokens, sort_keys=True).encode())
        return h.hexdigest()

    def encode(self, text: str) -> list[int]:
        # special tokens written out in the text are the tokens: a decoded <|endoftext|> encodes back
        with library_panics(self.name, "tiktoken"):
            return list(self.encoding.encode(text, allowed_special="all"))

    def decode(self, ids: Iterable[int]) -> str:
        ids = id_list(ids)
        self.check_ids(ids)
        try:
            with library_panics(self.name, "tiktoken"):
                return self.encoding.decode(ids)
        except KeyError:  # an ID inside the range that no token has (gaps before special tokens)
            gap = next((i for i in ids if not self.token_bytes(i)), "?")  # found again: tiktoken's key is text
            raise TokenizerError(
                f"ID {gap} is no token of {self.name} (a gap in its ranks)",
                path=self.path,
                causes=["the IDs were encoded with another tokenizer"],
            ) from None

    def token_bytes(self, id: int) -> bytes:
        try:
            return bytes(self.encoding.decode_single_token_bytes(id))
        except KeyError:  # a gap in the ranks (cl100k_base's 100256): no bytes, as a Hugging Face ID without a token
            return b""

    def ranks_text(self) -> str:
        """The ranks as a `.tiktoken` file's text (what `from_file` reads)."""
        ordered = sorted(self.ranks.items(), key=lambda kv: kv[1])
        return "".join(f"{base64.b64encode(b).decode()} {r}\n" for b, r in ordered)


def _known_pattern(stem: str) -> str:
    """The split pattern of the tiktoken encoding `stem`, from tiktoken's own module where it
    names one; GPT-2's otherwise."""
    import tiktoken_ext.openai_public as public

    names = {"cl100k_base": "CL100K_PAT_STR", "o200k_base": "O200K_PAT_STR"}
    return str(getattr(public, names.get(stem, "r50k_pat_str"), GPT2_PATTERN))


# -- Hugging Face tokenizer.json -----------------------------------------------------------------


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable stand-in character for each byte, reversed (what ByteLevel tokens spell)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _mentions(node: Any, kind: str) -> bool:
    """Whether a tokenizer.json component (or a Sequence of them) is of type `kind`. A loop, not a
    recursion: however deep the file nests, it raises no RecursionError."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == kind:
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizer.json`. Lossless where it is byte-level without a normalizer
    (GPT-2, Llama 3); SentencePiece-style ones (Llama 2) normalise."""

    kind = "hf"

    def __init__(self, tokenizer: Any, spec: dict, *, path: str | None = None):
        self.tok = tokenizer
        self.path = path
        self.byte_level = _mentions(spec.get("decoder"), "ByteLevel")
        self.lossless = self.byte_level and not spec.get("normalizer")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> HFTokenizer:
        try:
            from tokenizers import Tokenizer as HFCore
        except ImportError:
            raise _missing_library("tokenizers", path) from None
        path = Path(path)
        data = read_tokenizer_file(path, "tokenizer.json")
        text = utf8_text(data, path=path, error=TokenizerError, lead="Not a tokenizer: ")  # a BOM accepted
        # the parser of every JSON file a user hands over: nested 200,000 deep is a typed error, no RecursionError
        spec = parse_json(
            text, path=path, error=TokenizerError, what="read as a tokenizer.json", lead="Not a tokenizer: "
        )
        if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
            raise TokenizerError(
                f'Not a Hugging Face tokenizer.json: {path} has no "model" object',
                path=path,
                causes=[
                    "a tokenizer_config.json or vocab.json, not the tokenizer.json that save_pretrained writes",
                    'a char tokenizer has a "chars" list',
                ],
            )
        with library_panics(path, "tokenizers"):
            try:
                tok = HFCore.from_str(text)
            except Exception as exc:  # the library raises its own base Exception for any malformed file
                raise TokenizerError(
                    f"{path}: the tokenizers library refused it: {str(exc)[:300]}", path=path
                ) from None
        # a language model's text is one stream: a file's padding or truncation (a BERT-style setting,
        # or a hostile "Fixed": 2**40 that aborted the process allocating it) would change or cut it
        tok.no_padding()
        tok.no_truncation()
        return cls(tok, spec, path=str(path))

    @functools.cached_property
    def vocab_size(self) -> int:
        vocab = self.tok.get_vocab(with_added_tokens=True)
        return max(vocab.values()) + 1 if vocab else 0

    @functools.cached_property
    def special_tokens(self) -> dict[str, int]:
        return {t.content: i for i, t in self.tok.get_added_tokens_decoder().items() if t.special}

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 of the tokenizer as the library serialises it (vocabulary, merges, normalizer,
        added tokens): two files that tokenize alike but are written differently still agree."""
        return hashlib.sha256(b"hf\n" + self.tok.to_str().encode("utf-8")).hexdigest()

    def _encoding(self, text: str) -> Any:
        with library_panics(self.name, "tokenizers"), library_refusals(self.name, "tokenizers", "encode text"):
            return self.tok.encode(text, add_special_tokens=False)

    def encode(self, text: str) -> list[int]:
        return list(self._encoding(text).ids)

    def decode(self, ids: Iterable[int]) -> str:
        ids = id_list(ids)
        self.check_ids(ids)
        with library_panics(self.name, "tokenizers"), library_refusals(self.name, "tokenizers", "decode IDs"):
            return str(self.tok.decode(ids, skip_special_tokens=False))

    def token_bytes(self, id: int) -> bytes:
        piece = self.tok.id_to_token(id)
        if piece is None:
            return b""
        if id in self.special_tokens.values():
            return piece.encode("utf-8")
        if self.byte_level:
            table = _byte_decoder()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece)
        byte = _BYTE_PIECE.fullmatch(piece)
        if byte:
            return bytes([int(byte.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    def pieces(self, text: str) -> list[Piece]:
        encoding = self._encoding(text)
        starts = _byte_offsets(text)
        specials = set(self.special_tokens.values())
        return [
            Piece(i, self.token_bytes(i), starts[a], starts[b], i in specials)
            for i, (a, b) in zip(encoding.ids, encoding.offsets)
        ]


def _byte_offsets(text: str) -> list[int]:
    """The UTF-8 byte offset of each character offset in `text` (one past the end included)."""
    out, pos = [0], 0
    for c in text:
        pos += len(c.encode("utf-8"))
        out.append(pos)
    return out


# -- SentencePiece --------------------------------------------------------------------------------


def _require_text_pieces(processor: Any, path: Path) -> None:
    """Every piece is UTF-8 text, as SentencePiece's trainer writes them: the library hands pieces
    to Python as str, so one that is not (a hand-edited or corrupt file) would make `decode`, the
    special tokens and every view of the piece raise UnicodeDecodeError."""
    n = int(processor.get_piece_size())
    try:
        processor.id_to_piece(list(range(n)))  # one call for all: ~0.15 us a piece
        return
    except UnicodeDecodeError:
        pass
    for i in range(n):
        try:
            processor.id_to_piece(i)
        except UnicodeDecodeError as exc:
            raise TokenizerError(
                f"Not a usable SentencePiece model: {path} piece {i} is not UTF-8 text ({exc.reason} at byte "
                f"{exc.start} of {exc.object[:16]!r}), so it could never be decoded or shown",
                path=path,
                causes=["a corrupt or hand-edited model file"],
            ) from None


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece `.model` (Llama 2, T5, Gemma): normalises text (NFKC, whitespace), so a
    round trip can change it; unknown bytes fall back to <0xNN> pieces where the model has them."""

    kind = "sentencepiece"
    lossless = False

    def __init__(self, processor: Any, *, path: str | None = None):
        self.sp = processor
        self.path = path

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> SentencePieceTokenizer:
        try:
            import sentencepiece
        except ImportError:
            raise _missing_library("sentencepiece", path) from None
        path = Path(path)
        data = read_tokenizer_file(path, "SentencePiece model")
        processor = sentencepiece.SentencePieceProcessor()
        try:
            processor.LoadFromSerializedProto(data)
        except (RuntimeError, OSError, TypeError) as exc:
            raise TokenizerError(
                f"Not a SentencePiece model: {path} does not parse ({str(exc)[:200]})",
                path=path,
                causes=["another kind of file", "a truncated download or a Git LFS pointer"],
            ) from None
        _require_text_pieces(processor, path)
        return cls(processor, path=str(path))

    @functools.cached_property
    def vocab_size(self) -> int:
        return int(self.sp.get_piece_size())

    @functools.cached_property
    def special_tokens(self) -> dict[str, int]:
        sp = self.sp
        return {sp.id_to_piece(i): i for i in range(self.vocab_size) if sp.is_control(i) or sp.is_unknown(i)}

    @property
    def eot_id(self) -> int | None:
        eos = int(self.sp.eos_id())
        return eos if eos >= 0 else None

    @property
    def bos_id(self) -> int | None:
        bos = int(self.sp.bos_id())
        return bos if bos >= 0 else None

    @functools.cached_property
    def fingerprint(self) -> str:
        return hashlib.sha256(b"sentencepiece\n" + self.sp.serialized_model_proto()).hexdigest()

    def encode(self, text: str) -> list[int]:
        return list(self.sp.encode(text))

    def decode(self, ids: Iterable[int]) -> str:
        ids = id_list(ids)
        self.check_ids(ids)
        return str(self.sp.decode(ids))

    def token_bytes(self, id: int) -> bytes:
        piece = self.sp.id_to_piece(id)
        if self.sp.is_byte(id):
            byte = _BYTE_PIECE.fullmatch(piece)
            if byte:
                return bytes([int(byte.group(1), 16)])
        return piece.replace("\u2581", " ").encode("utf-8")

    def pieces(self, text: str) -> list[Piece]:
        try:  # sentencepiece >= 0.2.1 asks for return_type; older ones had out_type="immutable_proto"
            proto = self.sp.encode(text, return_type="proto")
        except TypeError:
            proto = self.sp.encode(text, out_type="immutable_proto")
        specials = set(self.special_tokens.values())
        return [Piece(p.id, self.token_bytes(p.id), p.begin, p.end, p.id in specials) for p in proto.pieces]
