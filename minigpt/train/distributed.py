"""Data-parallel training under `torchrun`: which process this is, and the few collectives the trainer needs.

    torchrun --standalone --nproc_per_node 2 -m minigpt train --workspace W

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; `init()` joins the process group (gloo on CPU, nccl
on CUDA). Without torchrun everything here is a no-op for a world of one, so the trainer has one code
path. Rank 0 alone takes the workspace lock and writes logs and checkpoints; every rank trains.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from minigpt.errors import ConfigError


@dataclass(frozen=True)
class World:
    rank: int = 0  # this process among all of them
    local_rank: int = 0  # this process on its node (picks the GPU)
    size: int = 1  # processes in all

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} in the environment is not an integer (set by torchrun)") from None


def from_env() -> World:
    """The world torchrun describes in the environment (a world of one without it)."""
    size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"RANK={rank} and WORLD_SIZE={size} in the environment do not describe a process group")
    return World(rank=rank, local_rank=_env_int("LOCAL_RANK", rank), size=size)


def current() -> World:
    """The world of the initialised process group (a world of one when none is)."""
    if dist.is_available() and dist.is_initialized():
        return World(
            rank=dist.get_rank(), local_rank=_env_int("LOCAL_RANK", dist.get_rank()), size=dist.get_world_size()
        )
    return World()


def init(device: str = "auto") -> World:
    """Join the process group torchrun set up (nccl when this process trains on CUDA, else gloo).
    A world of one initialises nothing."""
    world = from_env()
    if not world.distributed or dist.is_initialized():
        return current() if world.distributed else world
    if not dist.is_available():
        raise ConfigError("WORLD_SIZE > 1 but this torch build has no torch.distributed")
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        torch.cuda.set_device(world.local_rank)  # before the group: nccl binds each rank to its GPU
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    return world


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def device_for(device: torch.device, world: World) -> torch.device:
    """One GPU per process: `cuda` becomes `cuda:<local rank>` in a distributed run."""
    if world.distributed and device.type == "cuda" and device.index is None:
        return torch.device("cuda", world.local_rank)
    return device


def all_sum(value: torch.Tensor, world: World) -> torch.Tensor:
    """The value summed over all ranks (the tensor itself in a world of one)."""
    if not world.distributed:
        return value
    value = value.clone()
    dist.all_reduce(value)  # SUM (gloo has no AVG)
    return value


def gather(obj: Any, world: World) -> list[Any]:
    """Every rank's `obj`, in rank order, on every rank (pickled: small objects only)."""
    if not world.distributed:
        return [obj]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, obj)
    return out
