"""Values for people: numbers with units and sensible precision, lists and row-dicts as tables.

One formatter for everything a check measured, so no Python repr (`None`, `['a', 'b']`, a dict of
a hundred rows) reaches the screen. Units come from the key's suffix (`_s` seconds, `_gib`, `bytes`,
`_fraction`/`_share` percent); the label drops the suffix the value now carries.
"""

from __future__ import annotations

import math

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

MAX_LIST_ITEMS = 8  # scalars shown from a list before "… N more"
MAX_ROWS = 8  # rows shown from a list of row-dicts before "… N more rows"
MAX_PATH_CELL = 32  # a path in a table cell, shortened from the left
_PERCENT_SUFFIXES = ("_fraction", "_share", "relative_drop")
_LR_KEYS = ("lr", "learning_rate")
NONE = Text("none", style="dim")


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; bytes stay whole."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if n < 100 else f"{n:.0f} {unit}"
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    minutes, seconds = divmod(round(s), 60)
    return f"{minutes} min {seconds:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def human_float(x: float) -> str:
    """Four significant digits, scientific only for very small or very large magnitudes."""
    if not math.isfinite(x):
        return "NaN" if math.isnan(x) else ("+inf" if x > 0 else "-inf")
    if x == 0:
        return "0"
    if abs(x) < 1e-3 or abs(x) >= 1e7:
        return f"{x:.3e}"
    return f"{x:.4g}"


def label(key: str) -> str:
    """`gpu_memory_gib` -> 'gpu memory'; the unit moves into the value."""
    for suffix in ("_gib", "_mib", "_bytes", "_s"):
        if key.endswith(suffix) and len(key) > len(suffix):
            key = key[: -len(suffix)]
            break
    return key.replace("_", " ")


def human_scalar(key: str, value) -> Text:
    """One value as text, its unit taken from the key."""
    key = key.lower()
    if value is None:
        return NONE
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, str):
        return Text(value)
    if isinstance(value, int):
        if key.endswith("bytes") or key == "size":
            return Text(human_bytes(value))
        if key.endswith("_s"):
            return Text(human_seconds(value))
        return Text(f"{value:,}")
    if isinstance(value, float):
        if not math.isfinite(value):
            return Text(human_float(value), style="bold red")
        if key.endswith("_s"):
            return Text(human_seconds(value))
        if key.endswith("_gib"):
            return Text(f"{value:.1f} GiB")
        if key.endswith("_mib"):
            return Text(f"{value:.0f} MiB")
        if key.endswith("bytes"):
            return Text(human_bytes(value))
        if key.endswith(_PERCENT_SUFFIXES):
            return Text(f"{value:.1%}")
        if key in _LR_KEYS or key.startswith("lr_") or key.endswith("_lr"):
            return Text(f"{value:.2e}")
        return Text(human_float(value))
    return Text(str(value))


def _is_shape(key: str, value: list) -> bool:
    return "shape" in key.lower() and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def human_list(key: str, value: list | tuple, max_items: int = MAX_LIST_ITEMS) -> RenderableType:
    if not value:
        return NONE
    if _is_shape(key, list(value)):
        return Text(" × ".join(str(v) for v in value))
    if all(isinstance(v, dict) for v in value):
        return rows_table(list(value))
    shown = [human_scalar(key, v) if not isinstance(v, (list, tuple, dict)) else Text(compact(v)) for v in value]
    text = Text(", ").join(shown[:max_items])
    if len(value) > max_items:
        text.append(f"  … {len(value) - max_items} more", style="dim")
    return text


def compact(value) -> str:
    """A nested value on one line without Python syntax (inside table cells)."""
    if isinstance(value, dict):
        return ", ".join(f"{label(str(k))} {compact(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(compact(v) for v in value) or "none"
    return human_scalar("", value).plain


def human_value(key: str, value) -> RenderableType:
    """Any JSON-like value as a renderable: scalars as text, lists joined, row-dicts as a table,
    dicts as a nested key/value grid."""
    if isinstance(value, dict):
        return values_grid(value) if value else NONE
    if isinstance(value, (list, tuple)):
        return human_list(key, value)
    return human_scalar(key, value)


def rows_table(rows: list[dict], max_rows: int = MAX_ROWS) -> Table:
    """Row-dicts as a table with a header (the union of their keys, in first-seen order)."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    table = Table(box=None, padding=(0, 1, 0, 0), show_edge=False, header_style="bold")
    for col in columns:
        numeric = all(isinstance(r.get(col), (int, float)) and not isinstance(r.get(col), bool) for r in rows)
        table.add_column(label(col), justify="right" if numeric else "left", overflow="fold")
    for row in rows[:max_rows]:
        cells = []
        for col in columns:
            v = row.get(col)
            if isinstance(v, (list, tuple)):
                cell = human_list(col, v) if _is_shape(col, list(v)) or not v else Text(compact(v))
                cells.append(cell if isinstance(cell, Text) else Text(compact(v)))
            elif isinstance(v, dict):
                cells.append(Text(compact(v)))
            elif isinstance(v, str) and (col == "path" or col.endswith("_path")):
                cells.append(Text(shorten_left(v, MAX_PATH_CELL)))  # the file name is what tells rows apart
            else:
                cells.append(human_scalar(col, v))
        table.add_row(*cells)
    if len(rows) > max_rows:
        table.caption = f"… {len(rows) - max_rows} more rows ({len(rows)} in all)"
        table.caption_justify = "left"
    return table


def values_grid(values: dict) -> Table:
    """`values` as label / value pairs, one per line; nested values render in place."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in values.items():
        grid.add_row(label(str(key)), human_value(str(key), value))
    return grid


def shorten_left(path: str, width: int) -> str:
    """`/very/long/path/to/file.pt` -> `…/path/to/file.pt`, cut at a `/` when possible, so the file
    name (the part that tells files apart) stays."""
    if width <= 1 or len(path) <= width:
        return path if len(path) <= max(width, 1) else "…"
    tail = path[-(width - 1) :]
    cut = tail.find("/")
    if 0 <= cut < len(tail) - 1:
        tail = tail[cut:]
    return "…" + tail


def clip_at_clause(text: str, cells: int) -> str:
    """`text` in at most `cells` characters: cut after the last "; " or ", " that fits (when that
    keeps most of it), else at the limit, and marked with "…"."""
    if len(text) <= cells:
        return text
    room = text[: cells - 1]
    cut = max(room.rfind("; "), room.rfind(", "))
    return (room[:cut] if cut > cells // 2 else room).rstrip() + "…"
