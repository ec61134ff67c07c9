"""One policy for torch's CPU threads, applied by the command-line entry points and the UI (never
by library functions, so a user's own `torch.set_num_threads` in their script always wins).

- `OMP_NUM_THREADS` (or `MKL_NUM_THREADS`) set: torch is left alone; the user chose.
- otherwise, training uses the physical cores this process may run on; the checks and sampling
  (debug-sized models, one sequence at a time) use 1 (more threads only add synchronisation on
  256-token batches);
- a busy machine (1-minute load average above the cores we may use) gets 1 thread: OpenMP threads
  spin-wait for a core the neighbour holds, many times slower than one thread
  (docs/performance.md);
- `share_with` > 0 leaves that many cores to another torch process of ours (the UI's training
  subprocess next to its checks).
"""

from __future__ import annotations

import os
from pathlib import Path

USER_SETTINGS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
CHECK_THREADS_MAX = 1  # debug-shaped work gains nothing from a second thread, and loses much under load
PURPOSES = ("train", "checks", "sample", "prepare")  # all but train: small work, one thread


def usable_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def physical_cores() -> int:
    """Distinct (package, core) pairs among the CPUs this process may use; logical count if unknown."""
    cpus = usable_cpus()
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add((topo.joinpath("physical_package_id").read_text().strip(), topo.joinpath("core_id").read_text()))
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def user_chose() -> bool:
    return any(os.environ.get(name, "").strip() for name in USER_SETTINGS)


def busy() -> bool:
    try:
        return os.getloadavg()[0] > len(usable_cpus())
    except OSError:
        return False


def recommended(purpose: str, *, share_with: int = 0) -> int | None:
    """Threads for `purpose` (one of PURPOSES), or None when the user's environment decides."""
    if purpose not in PURPOSES:
        raise ValueError(f"unknown thread purpose {purpose!r}: expected one of {', '.join(PURPOSES)}")
    if user_chose():
        return None
    cores = max(1, physical_cores() - share_with)
    if busy():
        return 1
    return cores if purpose == "train" else min(cores, CHECK_THREADS_MAX)


def apply(purpose: str, *, share_with: int = 0) -> int:
    """Set torch's intra-op threads by the policy; returns the count in effect."""
    import torch

    n = recommended(purpose, share_with=share_with)
    if n is not None:
        torch.set_num_threads(n)
    return torch.get_num_threads()


def child_env(purpose: str, *, share_with: int = 0, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a torch subprocess of ours (e.g. the UI's training run): OMP_NUM_THREADS set
    by the policy unless the user already set it."""
    env = dict(os.environ if base is None else base)
    n = recommended(purpose, share_with=share_with)
    if n is not None:
        env["OMP_NUM_THREADS"] = str(n)
    return env
