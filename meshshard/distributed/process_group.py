"""Process-group set-up: torchrun environment, gloo on CPU, NCCL on CUDA."""
from __future__ import annotations

import atexit
import datetime
import gc
import os
import threading
import time
from typing import Dict, Optional, Tuple
from urllib.parse import urlparse

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
    "lost_ranks",
    "RankLostError",
    "DEFAULT_TIMEOUT",
]

# Bounds how long a collective waits for a LIVE but silent peer (deadlock, a rank stuck in I/O).
# A dead peer is found much sooner: gloo fails at once on a closed connection and the heartbeat
# below names the rank; this timeout is the backstop for the rare wait that never fails.
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
# Heartbeat period; a rank whose counter does not move for _LOST_AFTER_S is reported lost.
_HEARTBEAT_S = 0.5
_LOST_AFTER_S = 5.0
_EXITED = "exited"
_HB_PREFIX = "meshshard/heartbeat/"


class RankLostError(RuntimeError):
    """A collective failed because one or more peers died or left (raised on the surviving ranks).

    Attributes:
        ranks (dict[int, str]): each lost rank and how it was found lost (``"exited"`` or
            ``"no heartbeat for N s"``, i.e. killed or frozen).
    """

    def __init__(self, message: str, ranks: Dict[int, str]):
        super().__init__(message)
        self.ranks = dict(ranks)

    def __reduce__(self):  # pickles (e.g. back to run_distributed's parent) with its ranks
        return type(self), (self.args[0], self.ranks)

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
    timeout: datetime.timedelta | float = DEFAULT_TIMEOUT,
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
        timeout: how long a collective waits for a live peer before it fails (a
            :class:`datetime.timedelta` or seconds; default :data:`DEFAULT_TIMEOUT`, 5 minutes).
            A peer that dies (killed, crashed, exited) is detected sooner, whatever this is:
            every rank sends a heartbeat through the rendezvous store, and a collective that
            fails raises :class:`RankLostError` naming the lost rank(s) on every survivor,
            typically within seconds. Raise it for ranks that may legitimately wait long on
            one another (e.g. rank 0 alone writing a huge checkpoint between collectives).
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
    _start_heartbeat(init_method)
    return dist.get_rank(), dist.get_world_size()


class _Heartbeat:
    """Counter that a daemon thread bumps in the rendezvous store every :data:`_HEARTBEAT_S`.

    It has its own store connection: the default store's client is also used by blocking
    rendezvous waits (e.g. ``new_group``), which would stall the beat and look like a death.
    """

    def __init__(self, store, rank: int, world: int, where: str):
        self.store, self.rank, self.world, self.where = store, rank, world, where
        self.stop = threading.Event()
        self.store.set(self.key(rank), "0")
        self.thread = threading.Thread(target=self._run, name="meshshard-heartbeat", daemon=True)
        self.thread.start()

    @staticmethod
    def key(rank: int) -> str:
        return f"{_HB_PREFIX}{rank}"

    def _run(self) -> None:
        beat = 0
        while not self.stop.wait(_HEARTBEAT_S):
            beat += 1
            try:
                self.store.set(self.key(self.rank), str(beat))
            except Exception:  # noqa: BLE001 - the store's host is gone; lost_ranks reports it
                return

    def leave(self) -> None:
        """Stop beating and mark this rank as exited (so peers say "exited", not "no heartbeat")."""
        if self.stop.is_set():
            return
        self.stop.set()
        self.thread.join(timeout=2 * _HEARTBEAT_S)
        try:
            self.store.set(self.key(self.rank), _EXITED)
        except Exception:  # noqa: BLE001 - store gone: nobody is left to tell
            pass


_heartbeat: Optional[_Heartbeat] = None


def _store_address(init_method: Optional[str]) -> Optional[Tuple[str, int]]:
    if init_method is None or init_method.startswith("env://"):
        return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    url = urlparse(init_method)
    if url.scheme == "tcp" and url.hostname and url.port:
        return url.hostname, url.port
    return None  # file:// and others: no second client to open, so no heartbeat


def _start_heartbeat(init_method: Optional[str]) -> None:
    global _heartbeat
    address = _store_address(init_method)
    if address is None or dist.get_world_size() == 1:
        return
    try:
        store = dist.TCPStore(address[0], address[1], is_master=False,
                              timeout=datetime.timedelta(seconds=10), wait_for_workers=False)
        _heartbeat = _Heartbeat(store, dist.get_rank(), dist.get_world_size(), f"{address[0]}:{address[1]}")
    except Exception:  # noqa: BLE001 - without it, errors just do not name the lost rank
        _heartbeat = None
        return
    atexit.register(_heartbeat.leave)  # a clean exit (also after an exception) says "exited"


def lost_ranks(wait_s: float = _LOST_AFTER_S) -> Dict[int, str]:
    """Peers of the default group that have died or left, found through their heartbeats.

    Meant for after a collective failed: reads every rank's heartbeat counter and waits up to
    ``wait_s`` for each to move; a rank that marked itself exited, or whose counter stays still,
    is lost. If the rendezvous store itself is unreachable, its host (rank 0's process, or the
    torchrun agent) is gone; that is reported as rank 0. Costs up to ``wait_s`` seconds; call it
    only on an error path.

    Args:
        wait_s: seconds to watch the counters.

    Returns:
        ``{rank: reason}`` for every lost rank (empty when all are alive, or without a group or
        heartbeat, e.g. a ``file://`` rendezvous).
    """
    hb = _heartbeat
    if hb is None or not is_initialized():
        return {}
    peers = [r for r in range(hb.world) if r != hb.rank]

    def read(r: int) -> str:  # a rank that died before its first beat has no key yet
        return hb.store.get(hb.key(r)).decode() if hb.store.check([hb.key(r)]) else ""

    try:
        first = {r: read(r) for r in peers}
    except Exception:  # noqa: BLE001 - store unreachable: its host died
        return {0: f"unreachable (the rendezvous store at {hb.where}, hosted by rank 0 or the launcher, is gone)"}
    lost = {r: _EXITED for r, v in first.items() if v == _EXITED}
    settled = set(lost)  # exited, or seen beating
    deadline = time.monotonic() + wait_s
    try:
        while len(settled) < len(peers) and time.monotonic() < deadline:
            time.sleep(_HEARTBEAT_S / 2)
            for r in peers:
                if r not in settled:
                    now = read(r)
                    if now == _EXITED:
                        lost[r] = _EXITED
                    if now != first[r]:
                        settled.add(r)
    except Exception:  # noqa: BLE001 - another survivor hosting the store left meanwhile
        waited = wait_s - max(deadline - time.monotonic(), 0.0)
        lost.update({r: f"no heartbeat for {waited:.1f} s, then the store went away" for r in peers if r not in settled})
        return dict(sorted(lost.items()))
    lost.update({r: f"no heartbeat for {wait_s:g} s (killed or frozen)" for r in peers if r not in settled})
    return dict(sorted(lost.items()))


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
    global _heartbeat
    if is_initialized():
        if _heartbeat is not None:
            _heartbeat.leave()
            _heartbeat = None
        if barrier and dist.get_world_size() > 1:
            try:
                dist.barrier()
            except Exception:  # noqa: BLE001 - teardown goes on regardless
                pass
        dist.destroy_process_group()
        gc.collect()
