"""A tokenizer's pieces in a row that wraps between pieces, never inside one: ␣the stays whole at
the end of a line (only a piece wider than the whole line folds)."""

from __future__ import annotations

from collections.abc import Iterator

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.text import Text


def wrap_pieces(labels: list[str], width: int) -> list[list[int]]:
    """The pieces of each line, by index: as many whole pieces as fit `width` cells."""
    lines: list[list[int]] = [[]]
    used = 0
    for i, label in enumerate(labels):
        w = cell_len(label)
        if lines[-1] and used + w > width:
            lines.append([])
            used = 0
        lines[-1].append(i)
        used += w
    return lines if lines[0] else []


class PieceRow:
    """`pieces`: (label, style) in order, each label as `minigpt.data.tokenizer_api.piece_label` writes it."""

    def __init__(self, pieces: list[tuple[str, str]]) -> None:
        self.pieces = pieces

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Text]:
        lines = wrap_pieces([label for label, _ in self.pieces], options.max_width)
        text = Text("\n").join(Text.assemble(*(self.pieces[i] for i in line)) for line in lines)
        text.overflow = "fold"  # a piece wider than the whole line: folded, as nothing else can show it
        yield text

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = [cell_len(label) for label, _ in self.pieces] or [0]
        return Measurement(min(max(widths), options.max_width), min(sum(widths), options.max_width))
