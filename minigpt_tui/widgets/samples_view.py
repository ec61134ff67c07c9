"""The run's samples by step (`logs/samples.jsonl`) beside the loss curve: step 0's noise, then
the data's characters, then its words. Pure rendering; the Loss pane reads the file on a thread."""

from __future__ import annotations

import math

from rich.text import Text

from minigpt.logs.samples import SampleRecord

SHOWN = 40  # the newest samples shown (a long run writes one per evaluation)


def samples_text(samples: list[SampleRecord], path: str) -> Text:
    if not samples:
        return Text(
            f"no samples yet in {path}: minigpt train writes one at step 0 and after each evaluation; "
            "a watched loop does with minigpt.watch(..., tokenizer=PATH)"
        )
    out = Text()
    hidden = len(samples) - SHOWN
    if hidden > 0:
        out.append(f"({hidden} earlier samples not shown)\n", style="dim")
    for s in samples[-SHOWN:]:
        val = f"  val {s.val_loss:.3f}" if s.val_loss is not None and math.isfinite(s.val_loss) else ""
        out.append(f"step {s.step}{val}\n", style="bold")
        out.append(s.prompt, style="dim")
        out.append(s.text.replace("\n", "⏎") + "\n")
    return out
