"""Generated IDs shown as text while they come: what `minigpt sample` and the Sampler pane write."""

from __future__ import annotations

from minigpt.data.tokenizer_api import Tokenizer


class TextStream:
    """IDs in, new text out. A character split over several byte-level tokens is given once it is
    whole, and a tokenizer that decodes a piece by its context (SentencePiece's leading spaces) is
    decoded as a whole each time, so the text shown is always `decode(ids)`."""

    def __init__(self, tokenizer: Tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = 0  # characters of the decoded text given out so far

    def push(self, token: int) -> str:
        self.ids.append(token)
        if len(self.ids) > 1 and self.tokenizer.kind == "char":
            return self.tokenizer.decode([token])  # one ID, one character: no need to decode it all
        text = self.tokenizer.decode(self.ids)
        whole = len(text.rstrip("\ufffd"))  # a trailing replacement character may be half a character
        new = text[self.shown : whole]
        self.shown = max(self.shown, whole)
        return new

    def rest(self) -> str:
        """What is left at the end (a character that never became whole, as U+FFFD)."""
        if self.tokenizer.kind == "char" or not self.ids:
            return ""
        return self.tokenizer.decode(self.ids)[self.shown :]
