"""Process-group set-up: torchrun environment, gloo on CPU, NCCL on CUDA."""
from __future__ import annotations

import datetime
import os
from typing import Optional, Tuple

import torch
import torch.distributed as dist

__all__ = [
    "init_distributed",
    "destroy_distributed",
    "is_initialized",
    "get_rank",
    "get_world_size",
    "get_backend",
    "comm_device",
    "local_rank",
]

_TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def is_initialized() -> bool:
    """Whether a default process group exists."""
    return dist.is_available() and dist.is_initialized()


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (0 without a process group)."""
    return dist.get_rank(group) if is_initialized() else 0


def get_world_size(group=None) -> int:
    """Number of ranks in ``group`` (1 without a process group)."""
    return dist.get_world_size(group) if is_initialized() else 1


def get_backend(group=None) -> Optional[str]:
    """Backend name of ``group`` (``"gloo"``, ``"nccl"``, ...), ``None`` without a process group."""
    return str(dist.get_backend(group)) if is_initialized() else None


def local_rank() -> int:
    """``LOCAL_RANK`` from the torchrun environment (0 when unset)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def comm_device(group=None) -> torch.device:
    """Device on which tensors handed to ``group``'s collectives must live.

    NCCL moves CUDA tensors only; gloo (and the single-process fallback) uses the CPU.
    """
    backend = get_backend(group)
    if backend is not None and "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def init_distributed(
    backend: Optional[str] = None,
    timeout: datetime.timedelta | float = datetime.timedelta(minutes=10),
    init_method: Optional[str] = None,
    rank: Optional[int] = None,
    world_size: Optional[int] = None,
) -> Tuple[int, int]:
    """Start the default process group from the torchrun environment.

    Without torchrun variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and
    without an explicit ``init_method``, this is a no-op and the program runs as a single process:
    every meshshard collective then acts as world size 1. Calling it twice is harmless.

    Args:
        backend: ``"gloo"``, ``"nccl"`` or ``None`` to choose: NCCL when CUDA is available,
            else gloo.
        timeout: collective timeout (a :class:`datetime.timedelta` or seconds).
        init_method: optional rendezvous URL (e.g. ``"tcp://127.0.0.1:29500"``); with it,
            ``rank`` and ``world_size`` must be given.
        rank: global rank when not read from the environment.
        world_size: number of processes when not read from the environment.

    Returns:
        ``(rank, world_size)``.
    """
    if is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    have_env = all(v in os.environ for v in _TORCHRUN_VARS)
    if init_method is None and not have_env:
        return 0, 1
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("gloo", "nccl", "mpi", "ucc"):
        raise ValueError(f"unknown torch.distributed backend {backend!r}; use 'gloo' or 'nccl'")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise ValueError("backend='nccl' needs CUDA, which is not available; use backend='gloo'")
        torch.cuda.set_device(local_rank() % torch.cuda.device_count())
    kwargs = dict(backend=backend, timeout=timeout)
    if init_method is not None:
        if rank is None or world_size is None:
            raise ValueError("init_distributed(init_method=...) also needs rank and world_size")
        kwargs.update(init_method=init_method, rank=rank, world_size=world_size)
    dist.init_process_group(**kwargs)
    return dist.get_rank(), dist.get_world_size()


def destroy_distributed() -> None:
    """Tear down the default process group if one exists."""
    if is_initialized():
        dist.destroy_process_group()
