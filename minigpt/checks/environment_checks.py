"""What a run stands on before any token is read: Python, torch and the device, and the input files
present and plausibly sized (the tokenizer itself: `vocabulary_checks`)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.device import mps_available
from minigpt.errors import DataError, FileSystemError, MiniGPTError
from minigpt.io.commit import journal_path
from minigpt.io.files import describe_size, stat_input
from minigpt.io.workspace import settle

SMALL_FILE_BYTES = 64  # smaller than any real tokenizer or token file: an interrupted conversion


def _torch_version_tuple() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


@check("environment", "environment", "Python, torch and the device")
def environment(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    values = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_version": torch.version.cuda,
        "mps_available": mps_available(),
        "platform": platform.platform(),
        "executable": sys.executable,
    }
    device = ctx.device
    values["device"] = str(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        values.update(gpu_name=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    warnings, causes, fixes = [], [], []
    if ctx.options.expect_gpu and device.type == "cpu":
        warnings.append("--expect-gpu given but running on CPU")
        causes += [
            "torch was installed as a CPU-only build",
            "CUDA_VISIBLE_DEVICES hides the GPU",
            "the NVIDIA driver is missing or too old for this torch",
        ]
        fixes += [
            "python -c 'import torch; print(torch.version.cuda, torch.cuda.is_available())'",
            "reinstall torch with the CUDA wheel that matches your driver",
        ]
    if _torch_version_tuple() < (2, 10):
        warnings.append(f"torch {torch.__version__} is older than 2.10")
        causes.append("older torch has a weights_only unpickler vulnerability (CVE-2026-24747)")
        fixes.append("pip install 'torch>=2.10'")
    gpu = f", {values['gpu_name']} {values['gpu_memory_gib']} GiB" if "gpu_name" in values else ""
    summary = f"Python {values['python']}, torch {values['torch']}, device {device}{gpu}"
    if warnings:
        raise Outcome(Status.WARN, summary + "; " + "; ".join(warnings), causes=causes, fixes=fixes, values=values)
    return summary, values


@check("files", "files", "Required files present and plausibly sized")
def files(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    # an update a killed prepare, import or train left half done is finished, and what killed
    # writers left half-written is removed, as those commands do before they start
    try:
        settled = settle(ctx.ws, "check")
    except MiniGPTError as exc:  # a live writer is replacing the files now, or the update cannot be finished
        raise Outcome(
            Status.FAIL,
            f"the workspace is in the middle of an update ({journal_path(ctx.ws.root)}): {exc.message}",
            causes=["a prepare or import is replacing the files now", "one was killed and its update is stuck"],
            fixes=["run the check again once that command ends", *exc.causes],
        ) from None
    if settled.finished:
        ctx.refresh()  # the files the inputs named were replaced
    removed = settled.notices
    inputs = ctx.inputs
    # an encoding named by tiktoken:NAME is no file here: tokenizer_roundtrip reports its loading
    required = {"tokenizer": inputs.tokenizer} if inputs.tokenizer is not None else {}
    required["train_ids"] = inputs.train_data
    optional = {
        "val_ids": ctx.ws.ids("val"),
        "test_ids": ctx.ws.ids("test"),
        "checkpoint": inputs.checkpoint or inputs.checkpoint_default,
        "metrics": ctx.inputs.metrics,
    }
    rows, missing, small, unreadable, absent_optional = [], [], [], [], []
    for role, path in {**required, **optional}.items():
        size, problem = _input_size(path, role)
        exists = size is not None
        status = "ok" if exists else ("missing" if role in required else "absent")
        if problem and (path.exists() or path.is_symlink()):  # a loop, a FIFO, a folder, no permission
            status = "unreadable"
            unreadable.append(problem)
        # a torch.save file is never under 64 bytes; a JSON tokenizer of a few characters can be
        # (its own loader names what is wrong with it, in tokenizer_roundtrip)
        elif size == 0 and role == "metrics":
            status = "empty"  # a run that has not logged yet (a loop just started): training_curve says so
        elif size is not None and (size == 0 or (size < SMALL_FILE_BYTES and role not in ("metrics", "tokenizer"))):
            status = "empty" if size == 0 else "suspiciously small"
            small.append(f"{role} {path} ({size} B)")
        if not exists and status != "unreadable" and role in required:
            missing.append(f"{role} {path}")
        if not exists and role not in required:
            absent_optional.append(role)
        rows.append(
            {
                "role": role,
                "path": str(path),
                "exists": exists,
                "bytes": size,
                "size": describe_size(size) if size is not None else None,
                "status": status,
                "required": role in required,
            }
        )
    values = {"files": rows, "removed_leftovers": removed}
    if missing and not unreadable and not small and ctx.ws.loop_log.is_file():
        # a watched loop's folder holds logs, not a prepared corpus: what is absent is not a fault
        # (a tokenizer copied in beside the logs, for samples, is not a prepared workspace either)
        absent = " and ".join(role.replace("_", " ") for role in required if f"{role} {required[role]}" in missing)
        raise Outcome(
            Status.SKIP,
            f"a watched loop's folder ({ctx.ws.loop_log} holds the loop's record): no {absent} here, "
            "so the data, model and checkpoint checks are skipped; the loop checks and training_curve read the logs",
            values=values,
        )
    if missing or small or unreadable:
        raise Outcome(
            Status.FAIL,
            "; ".join(
                ([f"missing: {', '.join(missing)}"] if missing else [])
                + ([f"too small: {', '.join(small)}"] if small else [])
                + unreadable
                + removed
            ),
            causes=[
                "`minigpt prepare` was not run in this workspace",
                "wrong --workspace/--tokenizer/--train-data",
                "an interrupted conversion or copy left an empty file",
            ],
            fixes=["minigpt prepare --source demo --workspace DIR (or your corpus)", "check the paths printed above"],
            values=values,
        )
    note = f" (not present: {', '.join(absent_optional)})" if absent_optional else ""
    return "; ".join([f"{sum(1 for r in rows if r['exists'])} files found{note}", *removed]), values


def _input_size(path: Path, role: str) -> tuple[int | None, str | None]:
    """(size, None) for a readable regular file (or a folder, for a TensorBoard metrics log);
    (None, why) otherwise, with the reason in the words `stat_input` uses."""
    if role == "metrics" and path.is_dir():
        return sum(f.stat().st_size for f in path.iterdir() if f.is_file()), None
    try:
        return stat_input(path, role.replace("_", " "), error=DataError).st_size, None
    except (DataError, FileSystemError) as exc:
        return None, exc.message
