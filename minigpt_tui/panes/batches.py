"""Pane 4: a batch drawn through the check context (so an injected fault shows), inputs above
targets char by char (a subword tokenizer's: token by token, each column as wide as its longer
piece, wrapped to the pane), with every target[t] != input[t+1] highlighted and marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Group
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from minigpt.data.tokenizer_api import piece_label, visible
from minigpt_tui.host import session_of
from minigpt_tui.messages import CheckFinished, ChecksFinished, FaultChanged
from minigpt_tui.widgets.blank import BLANK_CONTAINERS
from minigpt_tui.widgets.deferred import RenderWhenShown
from minigpt_tui.widgets.live_static import LiveStatic
from minigpt_tui.widgets.status import status_text, visible_char

if TYPE_CHECKING:
    from minigpt.checks.result import CheckResult

MISMATCH_STYLE = "bold white on red"
OK_MARK, BAD_MARK, UNCHECKED_MARK = "✓", "✗", "·"
PIECE_STYLES = ("", "on #303030")  # neighbouring tokens told apart
LABEL_WIDTH = 9


def mismatches(inputs: list[int], targets: list[int]) -> list[int]:
    """Positions t where target[t] != input[t+1] (the last target has no input to compare with)."""
    return [t for t in range(len(targets) - 1) if targets[t] != inputs[t + 1]]


WATCHED_LOOP_NO_IDS = (
    "a watched loop's folder: the watch stores no token IDs, so there is no batch to draw here; "
    "the loop checks (key 1) judge the batches your loop fed (loop_targets_shifted, loop_batches_change)"
)


class BatchesPane(VerticalScroll, RenderWhenShown, can_focus=True):
    BLANK = BLANK_CONTAINERS  # a container without a border: drawn as its background (widgets/blank.py)
    BINDINGS = [
        Binding("up,k", "row(-1)", "Prev row"),
        Binding("down,j", "row(1)", "Next row"),
        Binding("n", "new_batch", "New batch"),
    ]

    @dataclass
    class BatchDrawn(Message):
        inputs: list[list[int]]  # (B, T) token IDs
        targets: list[list[int]]
        input_chars: list[list[str]]  # decoded, one string per ID: a character, or a subword piece ('¿' outside)
        target_chars: list[list[str]]
        seed: int
        fault: str | None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.drawn: BatchesPane.BatchDrawn | None = None
        self.row = 0
        self.seed = 0
        self.shift_check: CheckResult | None = None  # of batch_shift

    def compose(self) -> ComposeResult:
        yield LiveStatic("drawing a batch…", id="batch-view", markup=False)

    def on_mount(self) -> None:
        self.call_after_refresh(self.draw_batch)  # after the first frame: the worker imports torch

    def draw_batch(self) -> None:
        seed = self.seed
        self.app.run_worker(
            lambda: self._draw(seed),
            thread=True,
            exclusive=True,
            group="batches",
            exit_on_error=False,
            name="draw batch",
        )

    @dataclass
    class BatchFailed(Message):
        error: str
        problem: bool = True  # False: nothing is wrong, there is simply no batch to draw here

    def _draw(self, seed: int) -> None:
        """Worker thread: ctx.batch applies the injected fault, exactly as the batch_shift check sees it."""
        from minigpt.errors import MiniGPTError
        from minigpt.threads import apply as apply_thread_policy

        apply_thread_policy("checks")  # the check's own batch, so the checks' threads (set per thread)
        ctx = session_of(self).context
        try:
            from minigpt.checks.batch_checks import DEBUG_BATCH_SIZE, block_size

            x, y = ctx.batch(DEBUG_BATCH_SIZE, block_size(ctx), seed=seed)  # the batch_shift check's shape
            tok = ctx.tokenizer
        except MiniGPTError as exc:  # bad files: say so here, the files/tokenizer checks explain
            if ctx.ws.watched_loop_lacks(ctx.inputs.train_data):  # not a fault: the watch keeps logs only
                self.post_message(self.BatchFailed(WATCHED_LOOP_NO_IDS, problem=False))
            else:
                self.post_message(self.BatchFailed(f"cannot draw a batch: {exc.message}"))
            return
        inputs, targets = x.tolist(), y.tolist()
        labels: dict[int, str] = {}  # each distinct ID once: a row of a large vocabulary repeats many

        def decode(row: list[int]) -> list[str]:
            for i in row:
                if i not in labels:
                    labels[i] = _token_text(tok, i) if 0 <= i < tok.vocab_size else "¿"
            return [labels[i] for i in row]

        self.post_message(
            self.BatchDrawn(
                inputs, targets, [decode(r) for r in inputs], [decode(r) for r in targets], seed, ctx.fault_name
            )
        )

    @on(BatchDrawn)
    def show_batch(self, message: BatchDrawn) -> None:
        self.drawn = message
        self.row = min(self.row, len(message.inputs) - 1)
        self.render_batch()

    @on(BatchFailed)
    def show_failure(self, message: BatchFailed) -> None:
        self.drawn = None
        see = "\n(see the files and tokenizer checks, key 1)" if message.problem else ""
        self.query_one("#batch-view", Static).update(Text(message.error + see, style="" if message.problem else "dim"))

    @on(FaultChanged)
    def redraw_for_fault(self, message: FaultChanged) -> None:
        self.shift_check = None  # the old verdict belongs to the old fault
        self.draw_batch()

    @on(CheckFinished)
    def note_shift_check(self, message: CheckFinished) -> None:
        if message.result.id == "batch_shift":
            self.shift_check = message.result
            self.render_when_shown("batch", self.render_batch)

    @on(ChecksFinished)
    def redraw_after_checks(self, message: ChecksFinished) -> None:
        # the fault may have changed with this run: draw again through the new context
        if self.drawn is None or self.drawn.fault != message.report.fault:
            self.draw_batch()

    def action_row(self, delta: int) -> None:
        if self.drawn:
            self.row = (self.row + delta) % len(self.drawn.inputs)
            self.render_batch()

    def action_new_batch(self) -> None:
        self.seed += 1
        self.draw_batch()

    @property
    def mismatch_count(self) -> int:
        if not self.drawn:
            return 0
        return sum(len(mismatches(i, t)) for i, t in zip(self.drawn.inputs, self.drawn.targets))

    def render_batch(self) -> None:
        view = self.query_one("#batch-view", Static)
        b = self.drawn
        if b is None:
            return
        B, T = len(b.inputs), len(b.inputs[0])
        parts = []
        check = (
            Text.assemble(status_text(self.shift_check.status), " ", Text(self.shift_check.summary))
            if self.shift_check
            else Text("not run yet", style="dim")
        )
        parts.append(Text.assemble(("shift invariant (batch_shift check): ", "bold"), check))
        total = self.mismatch_count
        drawn = Text(f"this batch: {B}×{T}, seed {b.seed}" + (f", fault {b.fault}" if b.fault else "") + ", ")
        drawn.append(
            f"{BAD_MARK} {total} mismatches" if total else f"{OK_MARK} targets are inputs shifted by one",
            style="bold red" if total else "green",
        )
        parts.append(drawn)
        parts.append(
            Text(f"row {self.row + 1}/{B}   (↑↓/j k: row, n: new batch;  ␣ space  ⏎ newline  → tab)", style="dim")
        )
        row = (b.inputs[self.row], b.targets[self.row], b.input_chars[self.row], b.target_chars[self.row])
        if all(len(c) == 1 for c in b.input_chars[self.row] + b.target_chars[self.row]):
            parts.append(self._row_view(*row))
        else:
            parts.append(self._token_row_view(*row, width=max(40, self.size.width - 2)))
        parts.append(Text("rows:", style="bold"))
        for i in range(B):
            bad = mismatches(b.inputs[i], b.targets[i])
            line = Text("▶ " if i == self.row else "  ", style="bold")
            line.append(f"{i + 1:>2} ")
            line.append(
                f"{BAD_MARK} {len(bad):>2} mismatches " if bad else f"{OK_MARK}  0 mismatches ",
                style="bold red" if bad else "green",
            )
            line.append("".join(visible_char(c) if len(c) == 1 else visible(c) for c in b.input_chars[i]))
            parts.append(line)
        view.update(Group(*parts))

    @staticmethod
    def _token_row_view(
        inputs: list[int], targets: list[int], in_pieces: list[str], tg_pieces: list[str], width: int
    ) -> Text:
        """Input above target token by token: each position a column as wide as its longer piece,
        columns wrapped into groups that fit `width`; the group's first position leads it."""
        bad = set(mismatches(inputs, targets))
        groups: list[Text] = []
        start = 0
        while start < len(inputs):
            head, inp, tgt, marks = (Text(f"{h:<{LABEL_WIDTH}}") for h in (f"t {start}", "input", "target", "t→t+1"))
            used = LABEL_WIDTH
            t = start
            while t < len(inputs):
                a, b = visible(in_pieces[t]), visible(tg_pieces[t])
                w = max(cell_len(a), cell_len(b), 1)
                if used + w + 1 > width and t > start:
                    break
                shade = PIECE_STYLES[t % 2]
                inp.append(a + " " * (w - cell_len(a)), style=MISMATCH_STYLE if t - 1 in bad else shade)
                tgt.append(b + " " * (w - cell_len(b)), style=MISMATCH_STYLE if t in bad else shade)
                if t == len(targets) - 1:
                    marks.append(UNCHECKED_MARK.ljust(w), style="dim")
                elif t in bad:
                    marks.append(BAD_MARK.ljust(w), style="bold red")
                else:
                    marks.append(OK_MARK.ljust(w), style="green")
                for line in (inp, tgt, marks):
                    line.append(" ")
                used += w + 1
                t += 1
            groups.append(Text("\n").join([Text(head.plain, style="dim"), inp, tgt, marks]))
            start = t
        return Text("\n").join(groups)

    @staticmethod
    def _row_view(inputs: list[int], targets: list[int], in_chars: list[str], tg_chars: list[str]) -> Text:
        bad = set(mismatches(inputs, targets))
        label = "{:<9}".format
        tens = "".join(str(t // 10) if t % 10 == 0 else " " for t in range(len(inputs)))
        ones = "".join(str(t % 10) for t in range(len(inputs)))
        lines = [Text(label("t") + tens, style="dim"), Text(label("") + ones, style="dim")]
        inp = Text(label("input"))
        for t, ch in enumerate(in_chars):
            inp.append(visible_char(ch), style=MISMATCH_STYLE if t - 1 in bad else "")
        tgt = Text(label("target"))
        for t, ch in enumerate(tg_chars):
            tgt.append(visible_char(ch), style=MISMATCH_STYLE if t in bad else "")
        marks = Text(label("t→t+1"))
        for t in range(len(targets)):
            if t == len(targets) - 1:
                marks.append(UNCHECKED_MARK, style="dim")
            elif t in bad:
                marks.append(BAD_MARK, style="bold red")
            else:
                marks.append(OK_MARK, style="green")
        lines += [inp, tgt, marks]
        return Text("\n").join(lines)


def _token_text(tok, i: int) -> str:
    """One ID's text as the row shows it: a character as it is, a subword token's bytes decoded
    (a partial character's bytes as every view writes them: ␣<0xE2>)."""
    data = tok.token_bytes(i)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return piece_label(data)
