"""Reading the tokenizer files a user hands over (`.tiktoken`, `tokenizer.json`, SentencePiece
`.model`) before any tokenizer library sees them. The libraries trust their input: tiktoken panics
(a Rust panic, a `BaseException`) on a duplicate rank or a missing byte, so each file is bounded
in size and checked here, and a panic that still escapes a library is a typed error.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

from minigpt.errors import TokenizerError
from minigpt.io.files import describe_size, lfs_pointer_message, os_error, stat_input

# Real tokenizer files are small: GPT-2's tokenizer.json is 1.4 MB, o200k_base.tiktoken 3.6 MB,
# Gemma's 256k-piece SentencePiece model 4 MB, the largest common tokenizer.json files 20-40 MB.
# 256 MiB leaves room for any of them grown tenfold, and refuses a 2 GB file before it is read
# (reading one whole costs minutes and its size several times over in memory).
MAX_TOKENIZER_FILE_BYTES = 256 * 2**20
# tiktoken keeps IDs as 32-bit numbers, with 2**32 - 1 as its "no rank" mark; the ID after the
# last rank is <|endoftext|>'s where the file is named after no known encoding
MAX_RANK = 2**32 - 2


def read_tokenizer_file(path: Path, what: str) -> bytes:
    """The bytes of the tokenizer file `path` (`what` it should be, for messages): a TokenizerError
    when it is no regular file, empty, a Git LFS pointer or far larger than any tokenizer."""
    st = stat_input(path, "Tokenizer file", error=TokenizerError)
    if st.st_size > MAX_TOKENIZER_FILE_BYTES:
        raise _too_large(path, st.st_size, what)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_TOKENIZER_FILE_BYTES + 1)  # bounded even if it grew since the stat
    except OSError as exc:
        raise os_error(exc, path, action="read") from None
    if len(data) > MAX_TOKENIZER_FILE_BYTES:
        raise _too_large(path, len(data), what)
    if not data.strip():
        raise TokenizerError(f"Not a {what}: {path} is empty (an interrupted save?)", path=path)
    lfs = lfs_pointer_message(path, data, len(data))
    if lfs:
        raise TokenizerError(f"Not a {what}: {lfs}", path=path)
    return data


def _too_large(path: Path, size: int, what: str) -> TokenizerError:
    return TokenizerError(
        f"Not a {what}: {path} is {size:,} bytes ({describe_size(size)}), far larger than any tokenizer "
        f"(the largest common ones are 20-40 MB); refused before reading it (limit "
        f"{describe_size(MAX_TOKENIZER_FILE_BYTES)})",
        path=path,
        causes=["another kind of file (a checkpoint, a dataset) given as the tokenizer"],
    )


def read_tiktoken_ranks(path: Path, reserved: Mapping[str, int] | None = None) -> dict[bytes, int]:
    """A `.tiktoken` ranks file (a base64 token, a space and its rank on each line), checked as
    tiktoken needs it: base64 that decodes, tokens and ranks each unique, ranks in [0, MAX_RANK]
    and none of the `reserved` special tokens' IDs, and each of the 256 single bytes a token (BPE
    starts from bytes: text with a byte that is no token makes tiktoken panic). The first fault is
    a TokenizerError naming the file, the line and the cause."""
    data = read_tokenizer_file(path, ".tiktoken ranks file")
    try:
        data.decode("ascii")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        raise TokenizerError(
            f"Not a .tiktoken ranks file: {path} line {line_no} has a non-ASCII byte (offset {exc.start})",
            path=path,
            causes=["another kind of file"],
        ) from None
    encoding = path.name.split(".")[0]
    specials = {rank: name for name, rank in (reserved or {}).items()}
    ranks: dict[bytes, int] = {}
    line_of_token: dict[bytes, int] = {}
    line_of_rank: dict[int, int] = {}
    # bytes split as tiktoken's own reader does (str.split would also split on \x1c-\x1f), lines on
    # "\n" alone, so line numbers are an editor's
    for n, line in enumerate(data.split(b"\n"), 1):
        fields = [field.decode("ascii") for field in line.split()]
        if not fields:
            continue
        try:
            token, rank = _parse_line(fields)
            if rank in specials:
                raise ValueError(
                    f"rank {rank} is the ID of {specials[rank]} in {encoding} (a file named after a tiktoken "
                    "encoding gets that encoding's special tokens)"
                )
            if token in line_of_token:
                raise ValueError(f"the token {token!r} repeats line {line_of_token[token]}'s (each token has one rank)")
            if rank in line_of_rank:
                raise ValueError(f"rank {rank} repeats line {line_of_rank[rank]}'s (each rank is one token)")
        except ValueError as exc:
            raise TokenizerError(f"Not a .tiktoken ranks file: {path} line {n}: {exc}", path=path) from None
        ranks[token] = rank
        line_of_token[token] = line_of_rank[rank] = n
    if not ranks:
        raise TokenizerError(f"Not a .tiktoken ranks file: {path} holds no ranks", path=path)
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        shown = ", ".join(f"0x{b:02X}" for b in missing[:8]) + (
            f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        )
        raise TokenizerError(
            f"Not a .tiktoken ranks file: {path} lacks {len(missing)} of the 256 single-byte tokens ({shown}): "
            "byte-level BPE starts from every byte, so text holding one of them could not be encoded",
            path=path,
            causes=["a truncated or hand-edited file", "the vocabulary of a tokenizer that is not byte-level"],
        )
    return ranks


def _parse_line(fields: list[str]) -> tuple[bytes, int]:
    """One line's (token, rank); a ValueError saying what is wrong with it."""
    if len(fields) != 2:
        raise ValueError(f"{' '.join(fields[:3])[:60]!r} is not 'BASE64 RANK' (a base64 token, a space, a rank)")
    token_text, rank_text = fields
    try:
        token = base64.b64decode(token_text, validate=True)
    except binascii.Error:
        raise ValueError(f"the token {token_text[:60]!r} is not valid base64") from None
    if not token:
        raise ValueError(f"the token {token_text[:60]!r} is empty")
    # ASCII digits only: int() would also take "+5" and "5_000"
    if rank_text.startswith("-") and rank_text[1:].isdigit():
        raise ValueError(f"rank {rank_text[:30]} is negative")
    if not rank_text.isdigit():
        raise ValueError(f"the rank {rank_text[:30]!r} is not a whole number")
    if len(rank_text) > 12 or int(rank_text) > MAX_RANK:
        raise ValueError(f"rank {rank_text[:30]} is beyond {MAX_RANK:,} (tiktoken keeps IDs as 32-bit numbers)")
    return token, int(rank_text)


def _is_rust_panic(exc: BaseException) -> bool:
    """pyo3's PanicException: a Rust panic inside tiktoken or tokenizers, raised as a BaseException
    (so `except Exception` lets it through). pyo3 exports no type to import for it: it is told by
    its class's module and name, never by its text."""
    kind = type(exc)
    return kind.__module__ == "pyo3_runtime" and kind.__name__ == "PanicException"


@contextlib.contextmanager
def library_panics(path: object, library: str) -> Iterator[None]:
    """Turn a Rust panic in `library` (reading or using the tokenizer `path`) into a TokenizerError;
    every other exception, KeyboardInterrupt included, passes unchanged."""
    try:
        yield
    except BaseException as exc:
        if not _is_rust_panic(exc):
            raise
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else "no message"
        raise TokenizerError(
            f"{path}: the {library} library failed on this tokenizer (a panic: {first})",
            path=path,
            causes=["a malformed or hand-edited tokenizer file", f"a bug in {library}"],
        ) from None


@contextlib.contextmanager
def library_refusals(path: object, library: str, doing: str) -> Iterator[None]:
    """Turn `library`'s refusal to `doing` (tokenizers raises its errors as the bare `Exception`
    class: a WordPiece model without its [UNK] token refuses every word) into a TokenizerError.
    Told by the exact class: a subclass (MemoryError, TypeError) is no refusal and passes on."""
    try:
        yield
    except Exception as exc:
        if type(exc) is not Exception:
            raise
        raise TokenizerError(
            f"{path}: the {library} library could not {doing}: {str(exc)[:200]}",
            path=path,
            causes=["a malformed or hand-edited tokenizer file"],
        ) from None
