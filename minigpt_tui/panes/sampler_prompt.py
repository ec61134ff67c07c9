"""The sampler's prompt against the tokenizer: the tokenizer and the session's sampler defaults,
read on a worker thread (building the options may import torch), and the prompt checked as it is
typed: a character tokenizer's unknown characters marked with carets, a subword tokenizer's token
count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.text import Text
from textual.message import Message

from minigpt.data.tokenizer_api import Tokenizer
from minigpt_tui.panes.sampler_form import default_settings
from minigpt_tui.widgets.status import visible_char

if TYPE_CHECKING:
    from minigpt.io.workspace import Workspace
    from minigpt_tui.session import Session

PROMPT_REFUSED = "the prompt has characters the model has never seen (marked ^): remove them"
# GPT-2 style BPE keeps a space with the word after it (␣the): a lone space token at the end of a
# text is rare in training, and what the model predicts after one is poor
LONE_SPACE_NOTE = "ends in a lone ␣ token, rare in BPE training"


@dataclass
class VocabLoaded(Message):
    chars: list[str] | None  # a character tokenizer's characters (prompt characters are checked against them)
    error: str | None
    defaults: dict | None  # the session's sampler settings and prompt (options may import torch)
    tokenizer: Tokenizer | None = None  # the tokenizer itself, whatever its kind
    problem: bool = True  # False: `error` says why there is no tokenizer here, and nothing is wrong


WATCHED_LOOP_NO_TOKENIZER = (
    "a watched loop's folder: the watch stores no tokenizer, so prompts cannot be encoded here; "
    "start minigpt-tui with --tokenizer FILE (the one your loop encodes with)"
)


def read_vocab(session: Session | None, workspace: Workspace | None) -> VocabLoaded:
    """The session's options (building them may import torch) and the tokenizer's characters."""
    options = session.options if session is not None else None
    defaults = None
    if options is not None:
        defaults = {**default_settings(options.sampler), "prompt": options.prompt}
    from minigpt.data.tokenizer import CharTokenizer  # torch-free
    from minigpt.data.tokenizer_load import load_tokenizer, workspace_tokenizer
    from minigpt.errors import MiniGPTError

    path: str | None
    try:
        path = options.resolve().tokenizer_spec if options is not None else None
    except MiniGPTError as exc:
        path, error = None, exc.message
    else:
        error = "no workspace: unknown prompt characters cannot be flagged"
    if path is None and workspace is not None:
        path = str(workspace_tokenizer(workspace.tokenizer))
    if path is None:
        return VocabLoaded(None, error, defaults)
    try:
        tok = load_tokenizer(path)
    except MiniGPTError as exc:
        if workspace is not None and workspace.watched_loop_lacks(path):
            return VocabLoaded(None, WATCHED_LOOP_NO_TOKENIZER, defaults, problem=False)
        return VocabLoaded(None, f"cannot read the tokenizer {path}: {exc.message}", defaults)
    chars = list(tok.chars) if isinstance(tok, CharTokenizer) else None
    return VocabLoaded(chars, None, defaults, tok)


def unknown_chars(prompt: str, chars: list[str] | None) -> dict[str, list[int]]:
    """The prompt's characters a character tokenizer lacks, each with its positions (none when
    there is no character list to check against)."""
    unknown: dict[str, list[int]] = {}
    if chars is not None:
        vocab = set(chars)
        for pos, ch in enumerate(prompt):
            if ch not in vocab:
                unknown.setdefault(ch, []).append(pos)
    return unknown


def prompt_check(
    prompt: str, chars: list[str] | None, tokenizer: Tokenizer | None, unknown: dict[str, list[int]]
) -> Text:
    """The line under the prompt: its token count (a subword tokenizer encodes any text), or its
    unknown characters marked ^ under them and listed."""
    if chars is None and tokenizer is not None:
        if not prompt:
            return Text("prompt: empty")
        ids = tokenizer.encode(prompt)
        line = Text(f"prompt: {len(ids)} tokens ({tokenizer.kind})")
        if ids and set(tokenizer.token_bytes(ids[-1])) == {ord(" ")}:
            line.append(f"; {LONE_SPACE_NOTE}", style="yellow")  # one line: typing never moves the pane
        return line
    if chars is None:
        return Text("prompt: not checked yet (the tokenizer is not loaded)")
    if not unknown:
        return Text("prompt: all characters are in the vocabulary" if prompt else "prompt: empty")
    marked, carets = Text("prompt: "), Text("        ")
    for ch in prompt:
        bad = ch in unknown
        shown = ch if ch.isprintable() else "?"
        marked.append(shown, style="bold reverse red" if bad else "")
        width = cell_len(shown)  # 日 and 😀 take two cells: the caret row must too
        carets.append(("^" * width) if bad else " " * width)
    listing = ", ".join(
        f"{visible_char(ch)} at {', '.join(map(str, pos[:3]))}{' …' if len(pos) > 3 else ''}"
        for ch, pos in list(unknown.items())[:5]
    )
    marked.append("\n").append_text(carets)
    marked.append(f"\n! {len(unknown)} character(s) not in the vocabulary: {listing}", style="bold red")
    return marked
