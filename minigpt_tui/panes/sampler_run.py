"""What the sampler pane runs in its worker thread: the next-token distribution after each
filter stage (its tokens labelled for the tables), and generation streamed back in batches.
Plain values go out as messages; torch is imported only when these run (never on first paint)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import cell_len
from textual.message import Message

from minigpt.data.tokenizer_api import Tokenizer
from minigpt.sample.repetition import repetition_report
from minigpt_tui.widgets.prob_bars import PIECE_MAX

STREAM_EVERY_S = 0.05  # batch streamed characters: at most ~20 UI updates a second per column
TOP_TOKENS = 8


@dataclass
class StagesComputed(Message):
    run_id: int
    stages: list[dict]
    title: str
    column: str = "A"  # whose settings filtered the distribution
    model_note: str = ""  # which model: the checkpoint's label or FRESH MODEL
    widest: int = PIECE_MAX  # the most cells a token's label takes (widest_label): the piece column's width


@dataclass
class TextGenerated(Message):
    run_id: int
    column: str
    text: str  # the characters since the last TextGenerated (every one matters: no can_replace)


@dataclass
class SampleFinished(Message):
    run_id: int
    column: str
    report: dict


@dataclass
class SamplerFailed(Message):
    run_id: int
    error: str


def token_labeller(tokenizer: Tokenizer) -> Callable[[int], str]:
    """A token's label for the next-token tables, as every view writes it (`token_label`: ␣ for a
    space, <0xE2> for a split character; an ID past the tokenizer, a padded row: '?')."""

    def label(token: int) -> str:
        return tokenizer.token_label(token) if token < tokenizer.vocab_size else "?"

    return label


def widest_label(tokenizer: Tokenizer) -> int:
    """The most cells one token's label takes: a character vocabulary's widest character; a
    subword vocabulary always has pieces wider than any table column (PIECE_MAX)."""
    from minigpt.data.tokenizer import CharTokenizer

    if isinstance(tokenizer, CharTokenizer):
        return max((cell_len(tokenizer.token_label(i)) for i in range(tokenizer.vocab_size)), default=1)
    return PIECE_MAX


def next_token_stages(model, ids: list[int], settings: dict, label: Callable[[int], str], first: str) -> list[dict]:
    """The top tokens after each filter stage for the prompt's last position, with `settings[first]`;
    also validates every column's settings (raises SamplerSettingsError)."""
    import torch

    from minigpt.model.contract import config_value, unpack
    from minigpt.sample.generate import filter_stages, validate

    for s in settings.values():
        validate(s, config_value(model, "vocab_size"))
    context = ids[-config_value(model, "block_size") :]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = unpack(model(torch.tensor([context], dtype=torch.long, device=device)))[0][0, -1, :]
    finally:
        model.train(was_training)
    stages = []
    for st in filter_stages(logits, context, settings[first]):
        probs, idx = torch.topk(st.probs.float().cpu(), min(TOP_TOKENS, st.probs.numel()))
        top = [(label(i), p) for p, i in zip(probs.tolist(), idx.tolist())]
        stages.append({"name": st.name, "survivors": st.survivors, "top": top})
    return stages


def stream_samples(
    post: Callable[[Message], object],
    run_id: int,
    model,
    ids: list[int],
    settings: dict,
    tokenizer,
    stopped: Callable[[], bool],
    *,
    eot: int | None = None,
    vocab_limit: int | None = None,
) -> None:
    """Generate each column in turn, posting the text in batches and a repetition report (with the
    tokens and tokens/s) at the end. A column ends at `eot` (the end-of-text token, where the run's
    data has one) without writing it; `vocab_limit` keeps a padded vocabulary's extra rows unsampled."""
    from minigpt.data.tokenizer_stream import TextStream
    from minigpt.sample.generate import generate

    for col, s in settings.items():
        pending: list[str] = []
        stream = TextStream(tokenizer)
        last = started = time.monotonic()

        def on_token(token: int, pending: list[str] = pending, col: str = col, stream: TextStream = stream) -> bool:
            nonlocal last
            if token == eot:
                return False
            pending.append(stream.push(token))
            if time.monotonic() - last >= STREAM_EVERY_S:
                post(TextGenerated(run_id, col, "".join(pending)))
                pending.clear()
                last = time.monotonic()
            return not stopped()

        new = generate(model, ids, s, on_token=on_token, vocab_limit=vocab_limit)
        seconds = time.monotonic() - started
        pending.append(stream.rest())
        if any(pending):
            post(TextGenerated(run_id, col, "".join(pending)))
        ended = eot is not None and bool(new) and new[-1] == eot
        report = repetition_report(tokenizer.decode(new[:-1] if ended else new))
        report.update(tokens=len(new), tokens_per_s=len(new) / seconds if seconds > 0 else None, ended_at_eot=ended)
        post(SampleFinished(run_id, col, report))
        if stopped():
            return
