"""Pane 3: the vocabulary and fingerprints (from the tokenizer checks), a live encoder for typed
text (a char tokenizer flags unknown characters; a subword one shows the pieces token by token, in
alternating colours, with their IDs and the round trip), and a decoded sample of the stored data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from minigpt_tui.host import session_of
from minigpt_tui.messages import CheckFinished
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.bounded_input import BoundedInput
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.pieces import PieceRow
from minigpt_tui.widgets.status import status_text, visible_char

if TYPE_CHECKING:
    from minigpt.checks.result import CheckResult

UNKNOWN_STYLE = "bold white on red"
PIECE_STYLES = ("black on #87afd7", "black on #d7af87")  # neighbouring pieces told apart
SPECIAL_STYLE = "bold white on #875f87"
# a few screenfuls: the pane re-encodes and redraws the whole text at every key
TEXT_MAX_CHARS = 4000


class TokenizerPane(VerticalScroll, RenderWhenShown):
    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)

    @dataclass
    class TokenizerLoaded(Message):
        tokenizer: Any  # a minigpt.data.tokenizer_api.Tokenizer (no tensors)

    @dataclass
    class TokenizerFailed(Message):
        error: str

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tokenizer = None
        self.roundtrip: CheckResult | None = None  # of tokenizer_roundtrip
        self.fingerprint: CheckResult | None = None  # of tokenizer_fingerprint
        self.last_ids: list[int] = []
        self.last_unknown: dict[str, list[int]] = {}

    def compose(self) -> ComposeResult:
        yield LiveStatic("vocabulary: waiting for the tokenizer checks…", id="tok-info", markup=False)
        yield BoundedInput(
            placeholder="type text to encode (unknown characters are flagged)",
            id="tok-input",
            max_length=TEXT_MAX_CHARS,
            what="the text to encode",
        )
        yield LiveStatic("", id="tok-encoded", markup=False)
        yield LiveStatic("decoded sample: waiting for the decoded_sample check…", id="tok-sample", markup=False)

    def on_mount(self) -> None:
        self.call_after_refresh(self._start_loading)

    def _start_loading(self) -> None:
        self.app.run_worker(
            self._load_tokenizer,
            thread=True,
            exclusive=True,
            group="tokenizer",
            exit_on_error=False,
            name="load tokenizer",
        )

    def _load_tokenizer(self) -> None:
        """Worker thread: the first use of the session's context imports torch."""
        try:
            tokenizer = session_of(self).context.tokenizer
        except Exception as exc:
            self.post_message(self.TokenizerFailed(str(exc)))
            raise
        self.post_message(self.TokenizerLoaded(tokenizer))

    @on(TokenizerLoaded)
    def use_tokenizer(self, message: TokenizerLoaded) -> None:
        self.tokenizer = message.tokenizer
        self.encode_input(self.query_one("#tok-input", Input).value)

    @on(TokenizerFailed)
    def show_failure(self, message: TokenizerFailed) -> None:
        self.query_one("#tok-encoded", Static).update(
            Text(f"tokenizer could not be loaded: {message.error}", style="bold red")
        )

    @on(Input.Changed, "#tok-input")
    def encode_typed(self, event: Input.Changed) -> None:
        self.encode_input(event.value)

    def encode_input(self, text: str) -> None:
        out = self.query_one("#tok-encoded", Static)
        tok = self.tokenizer
        if tok is None:
            out.update(Text("loading the tokenizer…", style="dim"))
            return
        if not text:
            self.last_ids, self.last_unknown = [], {}
            out.update(Text("(type above to see the IDs)", style="dim"))
            return
        if tok.kind != "char":
            out.update(self._pieces_view(tok, text))
            return
        unknown = tok.unknown_chars(text)
        ids = [tok.stoi[c] for c in text if c in tok.stoi]
        decoded = tok.decode(ids)
        self.last_ids, self.last_unknown = ids, unknown
        typed = Text()
        for ch in text:
            typed.append(visible_char(ch), style=UNKNOWN_STYLE if ch in unknown else "")
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("text", typed)
        grid.add_row("IDs", Text(" ".join(map(str, ids))))
        grid.add_row("decoded", Text(repr(decoded)))
        if unknown:
            shown = ", ".join(
                f"{visible_char(ch)} at {', '.join(map(str, pos[:5]))}{' …' if len(pos) > 5 else ''}"
                for ch, pos in unknown.items()
            )
            grid.add_row(
                "round trip",
                Text(f"✗ {len(unknown)} unknown character(s) not in the vocabulary: {shown}", style="bold red"),
            )
        elif decoded == text:
            grid.add_row("round trip", Text("✓ exact: decode(encode(text)) == text", style="green"))
        else:
            grid.add_row("round trip", Text("✗ decode(encode(text)) differs from the text", style="bold red"))
        out.update(grid)

    def _pieces_view(self, tok, text: str) -> Table:
        """A subword encoding token by token: each piece in its own colour, whitespace and split
        characters visible, then the IDs and the round trip (a normaliser's change shown, not failed)."""
        pieces = tok.pieces(text)
        ids = [p.id for p in pieces]
        self.last_ids, self.last_unknown = ids, {}
        decoded = tok.decode(ids)
        shown = PieceRow(
            [(piece.label, SPECIAL_STYLE if piece.special else PIECE_STYLES[n % 2]) for n, piece in enumerate(pieces)]
        )
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_row("pieces", shown)
        grid.add_row("IDs", Text(" ".join(map(str, ids))))
        per = f", {len(text) / len(ids):.1f} characters per token" if ids else ""
        grid.add_row("tokens", Text(f"{len(ids)} for {len(text)} characters{per}"))
        if decoded == text:
            grid.add_row("round trip", Text("✓ exact: decode(encode(text)) == text", style="green"))
        elif not tok.lossless:
            grid.add_row("round trip", Text(f"~ normalised: {decoded!r}", style="yellow"))
        else:
            grid.add_row("round trip", Text(f"✗ decode(encode(text)) gives {decoded!r}", style="bold red"))
        return grid

    @on(CheckFinished)
    def render_result(self, message: CheckFinished) -> None:
        r = message.result
        if r.id == "tokenizer_roundtrip":
            self.roundtrip = r
        elif r.id == "tokenizer_fingerprint":
            self.fingerprint = r
        elif r.id == "decoded_sample":
            self.render_when_shown("sample", lambda: self._show_sample(r))
            return
        else:
            return
        self.render_when_shown("info", self._show_info)

    def _show_info(self) -> None:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")
        if self.roundtrip is not None:
            v = self.roundtrip.values
            grid.add_row(
                "round trip check", Text.assemble(status_text(self.roundtrip.status), " ", Text(self.roundtrip.summary))
            )
            kind = v.get("kind", "char")
            size = v.get("vocab_size", "?")
            grid.add_row("vocab size", f"{size:,} ({kind})" if kind != "char" else str(size))
            grid.add_row("tokenizer fingerprint", Text(str(v.get("fingerprint", "?"))))
            unit = "characters" if kind == "char" else "tokens"
            grid.add_row(f"first {unit}", Text(" ".join(v.get("first_chars", v.get("first_tokens", [])))))
            grid.add_row(f"last {unit}", Text(" ".join(v.get("last_chars", v.get("last_tokens", [])))))
            special = v.get("special_tokens") or {}
            if special:
                grid.add_row("special tokens", Text(", ".join(f"{name} {i}" for name, i in list(special.items())[:6])))
        if self.fingerprint is not None:
            v = self.fingerprint.values
            grid.add_row("checkpoint fingerprint", Text(str(v.get("checkpoint_fingerprint", "none"))))
            grid.add_row(
                "fingerprint check",
                Text.assemble(status_text(self.fingerprint.status), " ", Text(self.fingerprint.summary)),
            )
        self.query_one("#tok-info", Static).update(grid)

    def _show_sample(self, r) -> None:
        text = r.values.get("text")
        head = Text.assemble("decoded sample of the training IDs  ", status_text(r.status), "  ", Text(r.summary))
        if text is None:
            self.query_one("#tok-sample", Static).update(head)
            return
        body = Text(text.replace("\t", "→"))
        self.query_one("#tok-sample", Static).update(Text("\n").join([head, body]))
