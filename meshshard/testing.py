"""Helpers for multi-process tests: spawn a gloo group, collect results, never hang.

Example::

    def check(rank, world_size, n):
        import meshshard as ms
        ...
        return value

    results = run_distributed(check, world_size=3, args=(10,), timeout=60)   # one entry per rank
"""
from __future__ import annotations

import io
import multiprocessing as mp
import os
import pickle
import queue
import socket
import time
import traceback
from typing import Any, Callable, List, Sequence

import torch

__all__ = ["run_distributed", "DistributedTestError", "DistributedTimeoutError"]


class DistributedTestError(RuntimeError):
    """A rank raised an exception that could not be re-raised as its own type."""


class DistributedTimeoutError(TimeoutError):
    """Some ranks did not finish before the timeout; every rank was killed.

    Attributes:
        pids (list[int]): process ids of every rank that was started (all killed and joined).
    """

    def __init__(self, message: str, pids=()):
        super().__init__(message)
        self.pids = list(pids)


class _RemoteTraceback(Exception):
    def __init__(self, tb: str):
        self.tb = tb

    def __str__(self) -> str:
        return self.tb


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dumps(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _worker(fn, rank, world_size, port, backend, args, kwargs, result_queue, threads):
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(threads)
    try:
        from meshshard.distributed import destroy_distributed, init_distributed

        init_distributed(backend=backend)
        out = fn(rank, world_size, *args, **kwargs)
        payload = _dumps(out)
        result_queue.put((rank, True, payload))
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        tb = traceback.format_exc()
        try:
            exc_bytes = pickle.dumps(exc)
        except Exception:  # noqa: BLE001
            exc_bytes = None
        result_queue.put((rank, False, (exc_bytes, tb)))
        result_queue.close()
        result_queue.join_thread()  # flushed before any teardown could abort the process
        return
    result_queue.close()
    result_queue.join_thread()
    try:
        destroy_distributed()
    except Exception:  # noqa: BLE001 - teardown errors after success do not matter
        pass


def run_distributed(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    kwargs: dict | None = None,
    timeout: float = 120.0,
    backend: str = "gloo",
    threads_per_rank: int = 1,
) -> List[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` spawned processes.

    Each process gets the torchrun environment variables (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT`` = a free loopback port) and a default process
    group started by :func:`meshshard.init_distributed` before ``fn`` runs.

    Args:
        fn: a picklable (module-level) function.
        world_size: number of processes (>= 1).
        args: extra positional arguments (picklable).
        kwargs: extra keyword arguments (picklable).
        timeout: seconds before every rank is killed and :class:`DistributedTimeoutError` raised.
        backend: ``"gloo"`` (CPU) or ``"nccl"``.
        threads_per_rank: ``torch.set_num_threads`` in every rank.

    Returns:
        ``fn``'s return value from each rank, indexed by rank.

    Raises:
        The first failing rank's exception (same type when it pickles, else
        :class:`DistributedTestError`), chained to the remote traceback text;
        :class:`DistributedTimeoutError` when ranks hang or die without a result.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    kwargs = kwargs or {}
    ctx = mp.get_context("spawn")
    result_queue = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(
            target=_worker,
            args=(fn, rank, world_size, port, backend, tuple(args), kwargs, result_queue, threads_per_rank),
            daemon=True,
        )
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    results: dict = {}
    deadline = time.monotonic() + timeout
    failure = None
    try:
        while len(results) < world_size and failure is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(range(world_size)) - set(results))
                raise DistributedTimeoutError(
                    f"{getattr(fn, '__name__', fn)}: ranks {missing} of {world_size} did not finish "
                    f"within {timeout:.0f}s (hang or deadlock); all ranks were killed",
                    pids=[p.pid for p in procs],
                )
            try:
                rank, ok, payload = result_queue.get(timeout=min(0.5, remaining))
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if r not in results and p.exitcode is not None]
                if dead:
                    # Give a rank that put its result just before exiting a moment to be read.
                    try:
                        rank, ok, payload = result_queue.get(timeout=2.0)
                    except queue.Empty:
                        codes = {r: procs[r].exitcode for r in dead}
                        raise DistributedTimeoutError(
                            f"{getattr(fn, '__name__', fn)}: ranks died without a result (exit codes {codes})",
                            pids=[p.pid for p in procs],
                        ) from None
                else:
                    continue
            if ok:
                results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
            else:
                failure = (rank, payload)
    finally:
        if failure is not None or len(results) < world_size:
            for p in procs:
                if p.is_alive():
                    p.kill()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if failure is not None:
        rank, (exc_bytes, tb) = failure
        exc = None
        if exc_bytes is not None:
            try:
                exc = pickle.loads(exc_bytes)
            except Exception:  # noqa: BLE001
                exc = None
        if not isinstance(exc, BaseException):
            exc = DistributedTestError(f"rank {rank} failed:\n{tb}")
        raise exc from _RemoteTraceback(f"\n--- rank {rank} of {world_size} ---\n{tb}")
    return [results[r] for r in range(world_size)]
