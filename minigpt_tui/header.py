"""What the app's header says: the injected fault, the judged checkpoint (and whether it changed
on disk since), the device and the workspace path, cut to the terminal's width. Pure functions."""

from __future__ import annotations

import os

HEADER_MARGIN = 18  # the header's icon takes 8 cells on the left and its clock's place 10 on the right


def header_subtitle(width: int, title: str, fault: str | None, checkpoint: str, device: str, root: str) -> str:
    """Fault first, then the judged checkpoint, the device, and the workspace path cut from the
    left to what is left of the header's width. Never longer than the header shows: short of room
    the path goes first, then the device's requested part ("cpu (auto)": "cpu"), then the device,
    and only then is the checkpoint's label cut; the fault's name is kept whole."""
    room = width - HEADER_MARGIN - len(f"{title} — ")  # Textual shows "TITLE — SUBTITLE"
    head = f"FAULT {fault} · " if fault else ""
    fields = f"{head}{checkpoint} · {device}"
    path_room = room - len(fields) - len(" · ")
    if path_room >= 8:  # a useful part of the path
        return f"{fields} · {root if len(root) <= path_room else '…' + root[-(path_room - 1) :]}"
    for shorter in (fields, f"{head}{checkpoint} · {device.split(' (')[0]}", f"{head}{checkpoint}"):
        if len(shorter) <= room:
            return shorter
    return shorter[: max(len(head), room - 1)] + "…"


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
