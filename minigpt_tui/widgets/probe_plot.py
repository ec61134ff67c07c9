"""The learning-rate probe's validation losses as a small plot (one line per rate), for the
checks pane's details. Drawn with textual-plotext's own figure (not plotext's global one, which
the loss pane's thread may be drawing at the same time)."""

from __future__ import annotations

import math

from rich.text import Text

# by rate, lowest to highest; the run's own rate (LR) always green
COLORS = {
    "LR/100": "magenta",
    "LR/30": "violet",
    "LR/10": "blue",
    "LR/3": "cyan",
    "LR": "green",
    "3xLR": "red",
    "10xLR": "orange",
    "30xLR": "yellow",
    "100xLR": "white",
}


def probe_plot(curves: dict, width: int = 60, height: int = 11) -> Text:
    """`curves`: rate name -> [steps, validation losses] (lr_probe's `values["curves"]`, four rates or more)."""
    from textual_plotext.plot import Plot

    plot = Plot()
    plot.plotsize(width, height)
    plot.theme("clear")
    drawn = False
    for name, series in curves.items():
        color = COLORS.get(name, "gray")
        steps, losses = series
        points = [(s, v) for s, v in zip(steps, losses) if isinstance(v, (int, float)) and math.isfinite(v)]
        if points:
            plot.plot([s for s, _ in points], [v for _, v in points], label=name, marker="braille", color=color)
            drawn = True
    if not drawn:
        return Text("(every probe run diverged: nothing to plot)")
    plot.title("lr probe: validation loss by step")
    plot.xlabel("step")
    return Text.from_ansi(plot.build())
