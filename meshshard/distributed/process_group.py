"""Process-group set-up: torchrun environment, gloo on CPU, NCCL on CUDA."""
from __future__ import annotations

import datetime
import gc
import os
from typing import Optional, Tuple

import torch
import torch.distributed as dist

__all__ = [
    "init_distributed",
    "destroy_distributed",
    "default_backend",
    "set_local_device",
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
    """This process's rank in ``group`` (0 without a process group).

    Args:
        group: process group (``None``: the default group).
    """
    return dist.get_rank(group) if is_initialized() else 0


def get_world_size(group=None) -> int:
    """Number of ranks in ``group`` (1 without a process group).

    Args:
        group: process group (``None``: the default group).
    """
    return dist.get_world_size(group) if is_initialized() else 1


def get_backend(group=None) -> Optional[str]:
    """Backend name of ``group`` (``"gloo"``, ``"nccl"``, ...), ``None`` without a process group.

    Args:
        group: process group (``None``: the default group).
    """
    return str(dist.get_backend(group)) if is_initialized() else None


def local_rank() -> int:
    """``LOCAL_RANK`` from the torchrun environment (0 when unset)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def comm_device(group=None) -> torch.device:
    """Device on which tensors handed to ``group``'s collectives must live.

    NCCL moves CUDA tensors only; gloo (and the single-process fallback) uses the CPU.

    Args:
        group: process group (``None``: the default group).
    """
    backend = get_backend(group)
    if backend is not None and "nccl" in backend:
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def default_backend() -> str:
    """The backend :func:`init_distributed` picks when none is given: ``"nccl"`` when CUDA is
    available, else ``"gloo"``."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def set_local_device() -> Optional[torch.device]:
    """Make ``cuda:LOCAL_RANK`` (modulo the visible GPU count) this process's current CUDA device.

    Returns:
        The device that was set, or ``None`` when CUDA is not available (nothing to do).
    """
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    index = local_rank() % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


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
    every meshshard collective then acts as world size 1. Calling it again once a group exists
    is harmless (it returns the existing rank and world size). A torchrun environment with only
    some of those variables raises instead of silently running as one process.

    On a machine with CUDA, the current CUDA device is set to ``LOCAL_RANK`` (modulo the number
    of visible GPUs) before the group starts, whatever the backend.

    Args:
        backend: ``"gloo"``, ``"nccl"`` or ``None`` to choose (:func:`default_backend`: NCCL
            when CUDA is available, else gloo).
        timeout: collective timeout (a :class:`datetime.timedelta` or seconds).
        init_method: optional rendezvous URL (e.g. ``"tcp://127.0.0.1:29500"``); with it,
            ``rank`` and ``world_size`` must be given.
        rank: global rank when not read from the environment.
        world_size: number of processes when not read from the environment.

    Returns:
        ``(rank, world_size)``.

    Example (``torchrun --nproc-per-node 3 train.py``)::

        rank, world = ms.init_distributed()          # gloo on CPU, NCCL on GPU
    """
    if is_initialized():
        return dist.get_rank(), dist.get_world_size()
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    present = [v for v in _TORCHRUN_VARS if v in os.environ]
    if init_method is None and len(present) < len(_TORCHRUN_VARS):
        if present and os.environ.get("WORLD_SIZE", "1") != "1":
            missing = [v for v in _TORCHRUN_VARS if v not in os.environ]
            raise RuntimeError(f"init_distributed: the torchrun environment is incomplete ({', '.join(present)} "
                               f"set, {', '.join(missing)} missing); start the program with torchrun")
        return 0, 1
    if backend is None:
        backend = default_backend()
    if backend not in ("gloo", "nccl", "mpi", "ucc"):
        raise ValueError(f"unknown torch.distributed backend {backend!r}; use 'gloo' or 'nccl'")
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend='nccl' needs CUDA, which is not available; use backend='gloo'")
    set_local_device()
    kwargs = dict(backend=backend, timeout=timeout)
    if init_method is not None:
        if rank is None or world_size is None:
            raise ValueError("init_distributed(init_method=...) also needs rank and world_size")
        kwargs.update(init_method=init_method, rank=rank, world_size=world_size)
    dist.init_process_group(**kwargs)
    return dist.get_rank(), dist.get_world_size()


def destroy_distributed(barrier: bool = True) -> None:
    """Tear down every process group if one exists (no-op otherwise).

    With torch 2.13 + gloo, tearing down while a peer still talks, or with a process group still
    held by a reference cycle (DeviceMesh / DTensor specs) when the interpreter exits, can abort
    a process after all its work is done ("terminate called without an active exception"). So
    this first waits for every rank (a barrier) and afterwards runs the garbage collector.

    Args:
        barrier: wait for every rank first; every rank must then call this. Pass ``False`` where
            peers may have failed (a barrier error is ignored either way).
    """
    if is_initialized():
        if barrier and dist.get_world_size() > 1:
            try:
                dist.barrier()
            except Exception:  # noqa: BLE001 - teardown goes on regardless
                pass
        dist.destroy_process_group()
        gc.collect()
