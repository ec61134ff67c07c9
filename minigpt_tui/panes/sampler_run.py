"""What the sampler pane runs in its worker thread: the next-token distribution after each
filter stage, and generation streamed back in batches. Plain values go out as messages; torch is
imported only when these run (never on first paint)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from textual.message import Message

from minigpt.sample.repetition import repetition_report

STREAM_EVERY_S = 0.05  # batch streamed characters: at most ~20 UI updates a second per column
TOP_TOKENS = 8


@dataclass
class StagesComputed(Message):
    run_id: int
    stages: list[dict]
    title: str
    column: str = "A"  # whose settings filtered the distribution
    model_note: str = ""  # which model: the checkpoint's label or FRESH MODEL


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


def _char(chars: list[str], token: int) -> str:
    return chars[token] if token < len(chars) else "?"


def next_token_stages(model, ids: list[int], settings: dict, chars: list[str], first: str) -> list[dict]:
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
        top = [(_char(chars, i), p) for p, i in zip(probs.tolist(), idx.tolist())]
        stages.append({"name": st.name, "survivors": st.survivors, "top": top})
    return stages


def stream_samples(
    post: Callable[[Message], object],
    run_id: int,
    model,
    ids: list[int],
    settings: dict,
    chars: list[str],
    stopped: Callable[[], bool],
) -> None:
    """Generate each column in turn, posting the text in batches and a repetition report at the end."""
    from minigpt.sample.generate import generate

    for col, s in settings.items():
        pending: list[str] = []
        last = time.monotonic()

        def on_token(token: int, pending: list[str] = pending, col: str = col) -> bool:
            nonlocal last
            pending.append(_char(chars, token))
            if time.monotonic() - last >= STREAM_EVERY_S:
                post(TextGenerated(run_id, col, "".join(pending)))
                pending.clear()
                last = time.monotonic()
            return not stopped()

        new = generate(model, ids, s, on_token=on_token)
        if pending:
            post(TextGenerated(run_id, col, "".join(pending)))
        post(SampleFinished(run_id, col, repetition_report("".join(_char(chars, t) for t in new))))
        if stopped():
            return
