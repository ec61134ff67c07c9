"""What the app's header says: the injected fault, the judged checkpoint (and whether it changed
on disk since), the device and the workspace path, cut to the terminal's width. Pure functions."""

from __future__ import annotations

import os


def header_subtitle(width: int, title: str, fault: str | None, checkpoint: str, device: str, root: str) -> str:
    """Fault first, then the judged checkpoint, the device, and the workspace path cut from the
    left to what is left of the header's width (80 columns show every field)."""
    head = f"FAULT {fault} · " if fault else ""
    fields = f"{checkpoint} · {device}"
    # the header shows "TITLE — SUBTITLE" between its icon and its right margin: 9 cells each
    room = width - 18 - len(title) - 3 - len(head) - len(fields) - 3
    if room < 8:  # no room for a useful part of the path: the fields matter more
        return f"{head}{fields}"
    if len(root) > room:
        root = "…" + root[-(room - 1) :]
    return f"{head}{fields} · {root}"


def judged_change(judged, stat=os.stat) -> str | None:
    """How the checkpoint a report judged differs from the file on disk now (a CLI run moved it
    to previous/ or wrote a new one), or None when it is the same file."""
    if judged is None:
        return None
    try:
        st = stat(judged.path)
    except FileNotFoundError:
        return "moved away"
    except OSError as exc:
        return f"unreadable now ({exc.strerror or exc})"
    if (judged.bytes is not None and st.st_size != judged.bytes) or (
        judged.mtime is not None and abs(st.st_mtime - judged.mtime) > 1e-3
    ):
        return "replaced"  # rewritten in place, or a new run wrote one where it was
    return None
