"""Which tokenizer the user named, and where a workspace keeps its own.

`--tokenizer` takes a path or `tiktoken:NAME`:

    tiktoken:gpt2, tiktoken:cl100k_base ...   tiktoken's encoding (its cache, else a download)
    FILE.tiktoken                             tiktoken ranks (the split pattern by the file's name)
    tokenizer.json (any *.json with "model")  Hugging Face tokenizers
    FILE.model                                SentencePiece
    char_tokenizer.json (*.json with "chars") minigpt's character tokenizer
    a folder, or hf:FOLDER                    the first of tokenizer.json, tokenizer.model, *.tiktoken,
                                              char_tokenizer.json in it

A workspace keeps the run's tokenizer in `tokenizer/` under one of those names.
"""

from __future__ import annotations

import os
from pathlib import Path

from minigpt.data.tokenizer import CharTokenizer
from minigpt.data.tokenizer_api import Tokenizer
from minigpt.data.tokenizer_libs import HFTokenizer, SentencePieceTokenizer, TiktokenTokenizer
from minigpt.errors import TokenizerError
from minigpt.io.atomic import StagedWrite, stage_text, staged_open
from minigpt.io.files import read_head, stat_input

TIKTOKEN_PREFIX = "tiktoken:"
HF_PREFIX = "hf:"
CHAR_FILE = "char_tokenizer.json"
# what a model folder or a workspace's tokenizer/ folder is searched for, in this order
FOLDER_FILES = (CHAR_FILE, "tokenizer.json", "tokenizer.model")


def is_named_encoding(spec: object) -> bool:
    """`tiktoken:NAME`: an encoding named, not a file."""
    return isinstance(spec, str) and spec.startswith(TIKTOKEN_PREFIX)


def tokenizer_file_in(folder: Path) -> Path | None:
    """The tokenizer file a folder holds (FOLDER_FILES, then a *.tiktoken), or None."""
    for name in FOLDER_FILES:
        if (folder / name).is_file():
            return folder / name
    ranks = sorted(folder.glob("*.tiktoken")) if folder.is_dir() else []
    return ranks[0] if ranks else None


def workspace_tokenizer(default: Path) -> Path:
    """A workspace's tokenizer: `default` (tokenizer/char_tokenizer.json) when present, else the
    BPE tokenizer an import wrote beside it; `default` when there is none (its messages name it)."""
    if default.exists():
        return default
    return tokenizer_file_in(default.parent) or default


def load_tokenizer(spec: str | os.PathLike) -> Tokenizer:
    """The tokenizer `spec` names (see the module's table); TokenizerError when it cannot be read."""
    text = os.fspath(spec)
    if text.startswith(TIKTOKEN_PREFIX):
        return TiktokenTokenizer.named(text[len(TIKTOKEN_PREFIX) :])
    if text.startswith(HF_PREFIX):
        return _from_folder(Path(text[len(HF_PREFIX) :]).expanduser(), text)
    path = Path(text).expanduser()
    if path.is_dir():
        return _from_folder(path, text)
    stat_input(
        path, "Tokenizer file", error=TokenizerError, missing=["run `minigpt prepare` first", "pass --tokenizer"]
    )
    suffix = path.suffix.lower()
    if suffix == ".tiktoken":
        return TiktokenTokenizer.from_file(path)
    if suffix == ".model":
        return SentencePieceTokenizer.from_file(path)
    if suffix == ".json" and path.name != CHAR_FILE and b'"chars"' not in read_head(path, 256):
        return HFTokenizer.from_file(path)
    return CharTokenizer.from_file(path)  # it names what it found where no "chars" list is


def _from_folder(folder: Path, spec: str) -> Tokenizer:
    found = tokenizer_file_in(folder)
    if found is None:
        raise TokenizerError(
            f"{spec}: no tokenizer in {folder}; expected one of {', '.join(FOLDER_FILES)} or a *.tiktoken file",
            path=folder,
            causes=[
                "the model was saved without its tokenizer: tokenizer.save_pretrained(FOLDER) writes tokenizer.json",
                "pass --tokenizer PATH or tiktoken:NAME",
            ],
        )
    return load_tokenizer(found)


def stage_in_workspace(tok: Tokenizer, folder: Path) -> StagedWrite:
    """Stage the tokenizer as a file of a workspace's tokenizer/ `folder`, under the name
    `workspace_tokenizer` looks for: the workspace then needs no network and no other file."""
    if isinstance(tok, CharTokenizer):
        return stage_text(tok.to_json(), folder / CHAR_FILE)
    if isinstance(tok, TiktokenTokenizer):
        # named after the encoding, so reading it back finds the same pattern and special tokens
        with staged_open(folder / f"{tok.encoding.name}.tiktoken", "w", encoding="ascii") as staged:
            staged.fh.write(tok.ranks_text())
        return staged
    if isinstance(tok, HFTokenizer):
        return stage_text(tok.tok.to_str(), folder / "tokenizer.json")
    if isinstance(tok, SentencePieceTokenizer):
        with staged_open(folder / "tokenizer.model", "wb") as staged:
            staged.fh.write(tok.sp.serialized_model_proto())
        return staged
    raise TokenizerError(f"cannot store a {type(tok).__name__} in a workspace")
