"""The sampler pane's two columns of settings, A and B: the fields, their parsing as they are
typed, the checks `minigpt.sample.settings.validate` makes (torch-free, cheap enough for every
keystroke), the defaults B tries out against A, and what each column holds after a run."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rich.text import Text

from minigpt.errors import SamplerSettingsError
from minigpt.sample.settings import SamplerSettings, unusual_settings, validate

# field, label, parser kind ("float" | "int" | "int?" where blank means None)
FIELDS = [
    ("temperature", "temperature", "float"),
    ("top_k", "top-k", "int?"),
    ("top_p", "top-p", "float"),
    ("repetition_penalty", "rep. penalty", "float"),
    ("max_new_tokens", "max new", "int"),
    ("seed", "seed (A=B)", "int?"),
]
COLUMNS = ("A", "B")
B_CHANGES = {"temperature": 0.7, "top_k": 10}  # what B tries out against A, unless the session says otherwise
AB_SEED = 0  # A and B share one seed so the comparison is fair: an unseeded default gets this one


@dataclass
class Column:
    """One column of the pane: its settings as typed and what its last run produced."""

    values: dict = field(default_factory=dict)  # parsed settings (A's seed is B's too)
    errors: dict[str, str] = field(default_factory=dict)  # field -> the inline error
    notes: list[str] = field(default_factory=list)  # validate's notices and warnings
    output: str = ""  # generated so far
    report: dict | None = None  # its repetition report, once generation finished
    stages: list[dict] | None = None  # the next-token distribution after each filter stage


def parse_field(kind: str, text: str):
    """Parse one settings field; raises ValueError with a message for the inline error."""
    text = text.strip()
    if kind == "int?" and text in ("", "none", "None", "off"):
        return None
    try:
        return float(text) if kind == "float" else int(text)
    except ValueError:
        what = "a number" if kind == "float" else "a whole number"
        raise ValueError(f"{text!r} is not {what}") from None


def _field_of(message: str) -> str:
    """validate() names the field first: 'temperature must be ...'."""
    return next((f for f, _, _ in FIELDS if message.startswith(f)), "temperature")


def read_settings(texts: dict[str, str], vocab_size: int) -> tuple[dict, dict[str, str], list[str]]:
    """(values, errors, notes) of one column from its fields' texts (by field name)."""
    values, errors = {}, {}
    for name, label, kind in FIELDS:
        try:
            values[name] = parse_field(kind, texts[name])
        except ValueError as exc:
            errors[name] = f"{label}: {exc}"
    notes: list[str] = []
    if not errors:
        settings = SamplerSettings(**values)
        try:
            notes = validate(settings, vocab_size) + unusual_settings(settings)
        except SamplerSettingsError as exc:
            errors[_field_of(exc.message)] = exc.message
    return values, errors, notes


def default_settings(sampler: SamplerSettings | None = None) -> dict[str, dict]:
    """Each column's starting values: the session's settings (or the built-in ones) in A, and B
    trying a lower temperature with top-k on; both on one seed."""
    a = dataclasses.asdict(sampler or SamplerSettings())
    if a["seed"] is None:
        a["seed"] = AB_SEED
    b = dict(a, temperature=B_CHANGES["temperature"], top_k=a["top_k"] or B_CHANGES["top_k"])
    return {"A": a, "B": b}


def column_title(col: str, values: dict, seed: object, running: bool) -> Text:
    v = values
    return Text(
        f"{col}: T={v.get('temperature')} k={v.get('top_k') or 'off'} p={v.get('top_p')} "
        f"rep={v.get('repetition_penalty')} seed={seed}" + (" ..." if running else "")
    )


def report_line(r: dict) -> Text:
    """A finished output's repetition, in one line (yellow when more than half of it repeats)."""
    loop = (
        f"loops with period {r['tail_period']} over its last {r['tail_length']} chars"
        if r["tail_period"]
        else "no loop at the end"
    )
    speed = f"  {r['tokens']} tokens, {r['tokens_per_s']:.0f}/s" if r.get("tokens_per_s") else ""
    end = "  ended at end-of-text" if r.get("ended_at_eot") else ""
    return Text(
        f"repetition {r['repetition_rate']:.2f}  distinct-1 {r['distinct_1']:.2f}  distinct-2 {r['distinct_2']:.2f}"
        f"  {loop}{speed}{end}",
        style="bold yellow" if r["repetition_rate"] > 0.5 else "",
    )
