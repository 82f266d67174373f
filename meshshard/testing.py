"""Helpers for multi-process tests: spawn a gloo group, collect results, never hang.

Example::

    def check(rank, world_size, n):
        import meshshard as ms
        ...
        return value

    results = run_distributed(check, world_size=3, args=(10,), timeout=60)   # one entry per rank
"""
from __future__ import annotations

import atexit
import io
import multiprocessing as mp
import os
import pickle
import queue
import socket
import sys
import time
import traceback
from typing import Any, Callable, List, Sequence

import torch

__all__ = ["run_distributed", "keep_workers", "DistributedTestError", "DistributedTimeoutError"]


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


def _set_rank_env(rank, world_size, port) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )


def _run_task(call, fn, rank, world_size, port, backend, args, kwargs, result_queue, threads) -> bool:
    """Start the group, run ``fn``, put ``(call, rank, ok, payload)`` on the queue. Returns ``ok``."""
    _set_rank_env(rank, world_size, port)
    torch.set_num_threads(threads)
    try:
        from meshshard.distributed import init_distributed

        init_distributed(backend=backend)
        if isinstance(fn, bytes):  # a pooled task: unpickled here so an import error reaches the parent
            fn, args, kwargs = pickle.loads(fn)
        out = fn(rank, world_size, *args, **kwargs)
        result_queue.put((call, rank, True, _dumps(out)))
        return True
    except BaseException as exc:  # noqa: BLE001 - everything must reach the parent
        tb = traceback.format_exc()
        try:
            exc_bytes = pickle.dumps(exc)
        except Exception:  # noqa: BLE001
            exc_bytes = None
        result_queue.put((call, rank, False, (exc_bytes, tb)))
        return False


def _worker(fn, rank, world_size, port, backend, args, kwargs, result_queue, threads):
    ok = _run_task(0, fn, rank, world_size, port, backend, args, kwargs, result_queue, threads)
    result_queue.close()
    result_queue.join_thread()  # flushed before any teardown could abort the process
    if ok:
        _teardown()


def _teardown() -> None:
    try:
        from meshshard.distributed import destroy_distributed

        destroy_distributed()
    except Exception:  # noqa: BLE001 - teardown errors after success do not matter
        pass


def _clear_user_handlers() -> None:
    """Forget the ShardTensor handlers a task registered (empty in a fresh process: meshshard's own
    handlers live in a separate table), so a later task gets the built-in behaviour or the error."""
    reg = sys.modules.get("meshshard.tensor._registry")
    if reg is not None:
        for table in (reg.FUNCTION_HANDLERS, reg.NAMED_FUNCTION_HANDLERS, reg.DISPATCH_HANDLERS):
            table.clear()


def _pool_worker(rank, task_queue, result_queue):
    """One persistent rank: runs tasks until killed or orphaned, each in a fresh process group, and resets
    the process state a task may change (environment, working directory, default dtype, grad
    mode, ShardTensor user handlers) so that every task starts as in a freshly spawned process. The default RNG is left as
    is: a fresh process seeds it at random too."""
    parent = mp.parent_process()
    while True:
        try:
            task = task_queue.get(timeout=1.0)
        except queue.Empty:
            if not parent.is_alive():  # the parent was killed before it could stop us
                return
            continue
        call, world_size, port, backend, payload, threads = task
        env, cwd = dict(os.environ), os.getcwd()
        torch.set_default_dtype(torch.float32)
        torch.set_grad_enabled(True)
        ok = _run_task(call, payload, rank, world_size, port, backend, (), {}, result_queue, threads)
        if not ok:  # peers may be stuck in a collective: the parent kills the whole pool
            result_queue.close()
            result_queue.join_thread()
            return
        _teardown()
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        _clear_user_handlers()
        result_queue.put((call, rank, None, None))  # idle: the group is gone, ready for the next task


class _Pool:
    """Persistent spawned ranks; worker ``r`` is rank ``r`` of every group it takes part in."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.result_queue = ctx.Queue()
        self.procs: list = []
        self.task_queues: list = []
        self.calls = 0  # tags each call's messages, so none left from an interrupted call is taken as this one's

    def grow(self, n: int) -> None:
        while len(self.procs) < n:
            q = self.ctx.Queue()
            p = self.ctx.Process(target=_pool_worker, args=(len(self.procs), q, self.result_queue), daemon=True)
            p.start()
            self.procs.append(p)
            self.task_queues.append(q)

    def kill(self) -> None:
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join()  # SIGKILL cannot be ignored: this returns once the process is gone


_pool: _Pool | None = None
_keep = False


def keep_workers(enabled: bool) -> None:
    """Reuse spawned ranks across :func:`run_distributed` calls (on) or spawn fresh ones per call (off).

    Starting a rank (a Python interpreter importing torch) costs seconds, far more than most
    multi-process checks; a test session turns this on once (``tests/conftest.py``). While on,
    rank ``r`` of every call runs in the same persistent process, in a process group started for
    that call and destroyed after it, with the environment, working directory, default dtype
    and grad mode reset between calls. Any failure or timeout kills every kept
    rank, so a rank stuck in a collective never leaks into the next call, which starts fresh ones.
    Turning it off (and interpreter exit) stops the kept ranks.

    Args:
        enabled: ``True`` to keep ranks between calls, ``False`` to stop them and spawn per call.
    """
    global _keep, _pool
    _keep = bool(enabled)
    if not _keep and _pool is not None:
        pool, _pool = _pool, None
        pool.kill()  # kept ranks hold nothing to save


atexit.register(keep_workers, False)


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
    group started by :func:`meshshard.init_distributed` before ``fn`` runs. The processes are
    fresh ones, or kept ones reused after :func:`keep_workers` ``(True)``.

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
    global _pool
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    kwargs = kwargs or {}
    ctx = mp.get_context("spawn")
    port = _free_port()
    deadline = time.monotonic() + timeout
    call_id = 0
    if _keep:
        payload = pickle.dumps((fn, tuple(args), kwargs))
        if _pool is None:
            _pool = _Pool(ctx)
        pool = _pool
        pool.calls += 1
        call_id = pool.calls
        pool.grow(world_size)
        procs, result_queue = pool.procs[:world_size], pool.result_queue
        for q in pool.task_queues[:world_size]:
            q.put((call_id, world_size, port, backend, payload, threads_per_rank))
    else:
        pool, result_queue = None, ctx.Queue()
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
    idle: set = set()  # kept ranks whose group is torn down after their result
    failure = None
    try:
        while len(results) < world_size and failure is None:
            item = _next_result(result_queue, procs, results, deadline, fn, world_size, timeout)
            if item is None:
                continue
            call, rank, ok, payload = item
            if call != call_id:
                continue
            if ok is None:
                idle.add(rank)
            elif ok:
                results[rank] = torch.load(io.BytesIO(payload), weights_only=False)
            else:
                failure = (rank, payload)
        if pool is not None and failure is None:
            _await_idle(pool, call_id, idle, world_size)
    finally:
        if pool is not None:
            if failure is not None or len(idle) < world_size:
                # a rank failed, hung, or did not tear down cleanly: the next call starts fresh ranks
                if _pool is pool:
                    _pool = None
                pool.kill()
        else:
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


def _next_result(result_queue, procs, results, deadline, fn, world_size, timeout):
    """The next ``(rank, ok, payload)``, or ``None`` to poll again; raises on timeout or dead ranks."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        missing = sorted(set(range(world_size)) - set(results))
        raise DistributedTimeoutError(
            f"{getattr(fn, '__name__', fn)}: ranks {missing} of {world_size} did not finish "
            f"within {timeout:.0f}s (hang or deadlock); all ranks were killed",
            pids=[p.pid for p in procs],
        )
    try:
        return result_queue.get(timeout=min(0.5, remaining))
    except queue.Empty:
        dead = [r for r, p in enumerate(procs) if r not in results and p.exitcode is not None]
        if not dead:
            return None
        # Give a rank that put its result just before exiting a moment to be read.
        try:
            return result_queue.get(timeout=2.0)
        except queue.Empty:
            codes = {r: procs[r].exitcode for r in dead}
            raise DistributedTimeoutError(
                f"{getattr(fn, '__name__', fn)}: ranks died without a result (exit codes {codes})",
                pids=[p.pid for p in procs],
            ) from None


def _await_idle(pool: _Pool, call_id: int, idle: set, world_size: int, wait_s: float = 60.0) -> None:
    """Collect into ``idle`` the kept ranks that have destroyed the call's group. One that dies or
    stalls in teardown does not fail the call (its results are in, as with fresh ranks); the
    caller then drops the pool."""
    deadline = time.monotonic() + wait_s
    while len(idle) < world_size and time.monotonic() < deadline:
        try:
            call, rank, ok, _ = pool.result_queue.get(timeout=0.5)
        except queue.Empty:
            if any(p.exitcode is not None for p in pool.procs[:world_size]):
                return
            continue
        if call == call_id and ok is None:
            idle.add(rank)
