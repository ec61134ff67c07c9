"""What the watch says once about the run it watches (the loop log's header: who writes, with which
model, optimizer and groups) and the process facts it reads (rank, memory in use)."""

from __future__ import annotations

import os
import sys

import torch
import torch.nn as nn

# modules that behave differently in train and eval mode (public classes only)
MODE_SENSITIVE = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
    nn.BatchNorm1d,
    nn.BatchNorm2d,
    nn.BatchNorm3d,
    nn.SyncBatchNorm,
)
LISTED = 20  # names kept in the header per list (the count is always there)


def describe_run(model: nn.Module, optimizer: torch.optim.Optimizer, *, names: dict[int, str], **facts: object) -> dict:
    """The loop log's header line; `facts` (started, scheduler, scaler, rank, world_size, interval,
    grads_every) are the watch's own settings, written as they are."""
    groups = []
    for i, g in enumerate(optimizer.param_groups):
        params = g["params"]
        one_d = [names.get(id(p), f"group{i}[{j}]") for j, p in enumerate(params) if p.dim() <= 1]
        groups.append(
            {
                "lr": as_float(g.get("lr")),
                "weight_decay": as_float(g.get("weight_decay", 0.0)),
                "params": len(params),
                "one_d": one_d[:LISTED],
                "one_d_count": len(one_d),
                "has_initial_lr": "initial_lr" in g,  # an lr_scheduler was attached to this group
                "initial_lr": as_float(g.get("initial_lr")),
            }
        )
    sensitive = [
        name
        for name, m in model.named_modules()
        if isinstance(m, MODE_SENSITIVE) and getattr(m, "p", 1.0) > 0  # dropout of 0 is no dropout
    ]
    return {
        "kind": "header",
        "pid": os.getpid(),
        "script": script_path(),
        "argv": sys.argv[:LISTED],
        "torch": torch.__version__,
        "model_class": f"{type(model).__module__}.{type(model).__qualname__}",
        "optimizer": f"{type(optimizer).__module__}.{type(optimizer).__qualname__}",
        "groups": groups,
        "mode_sensitive_modules": sensitive[:LISTED],
        "mode_sensitive_count": len(sensitive),
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        **facts,
    }


def as_float(value: object) -> float | None:
    """A learning rate or weight decay as a float (a tensor LR included), or None."""
    if isinstance(value, torch.Tensor):
        return float(value.detach().float().mean())
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def param_names(model: nn.Module) -> dict[int, str]:
    """id(parameter) -> its first name (tied weights keep one)."""
    names: dict[int, str] = {}
    for name, p in model.named_parameters():
        names.setdefault(id(p), name)
    return names


def memory_in_use(p: torch.Tensor | None) -> tuple[int | None, str | None]:
    """Bytes in use now: the CUDA allocator's count on a GPU, else this process's resident set."""
    if p is not None and p.device.type == "cuda":
        return int(torch.cuda.memory_allocated(p.device)), "cuda_allocated"
    try:
        return int(os.pread(_statm(), 128, 0).split()[1]) * _PAGE_SIZE, "rss"
    except (OSError, ValueError, IndexError):
        return None, None


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_statm_fd: tuple[int, int] | None = None  # (pid, descriptor): a forked child opens its own


def _statm() -> int:
    """A descriptor of this process's /proc/self/statm, kept open: a `pread` at 0 reads it afresh,
    and opening it at every full reading cost about 0.1 ms in the user's loop."""
    global _statm_fd
    pid = os.getpid()
    if _statm_fd is None or _statm_fd[0] != pid:
        _statm_fd = (pid, os.open("/proc/self/statm", os.O_RDONLY))
    return _statm_fd[1]


def rank_and_world() -> tuple[int, int]:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0") or 0), int(os.environ.get("WORLD_SIZE", "1") or 1)


def script_path() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return str(path) if path else (sys.argv[0] if sys.argv and sys.argv[0] else "<interactive>")
