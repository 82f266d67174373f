"""Raw (non-differentiable) collectives, safe on gloo and NCCL alike.

Only collectives that gloo runs with uneven sizes are used: ``all_to_all_single`` with split
sizes, ``all_gather_into_tensor``, ``all_reduce``, ``broadcast`` and point-to-point
``isend``/``irecv``. Every function also works without a process group (world size 1).
Tensors are moved to :func:`comm_device` for the call and results returned on the input's device.
"""
from __future__ import annotations

import contextlib
from typing import Iterator, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch.distributed import P2POp, ProcessGroup, ReduceOp

from meshshard.distributed.process_group import RankLostError, comm_device, get_rank, get_world_size, is_initialized, lost_ranks

__all__ = [
    "ReduceOp",
    "ProcessGroup",
    "P2POp",
    "CollectiveMismatchError",
    "all_to_all_single",
    "all_gather_into_tensor",
    "all_gather_sizes",
    "all_gather_object",
    "all_reduce",
    "all_reduce_async",
    "broadcast",
    "barrier",
    "batch_isend_irecv",
    "isend",
    "irecv",
    "new_group",
]


# torch >= 2.10 renamed all_gather_into_tensor; keep both working for torch>=2.4 users.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class CollectiveMismatchError(ValueError):
    """Ranks handed a collective inputs that do not fit together (raised on every rank)."""


@contextlib.contextmanager
def _naming_lost_ranks(what: str) -> Iterator[None]:
    """Turn a collective's failure caused by dead peers into :class:`RankLostError` naming them.

    gloo reports a dead peer as "Connection reset/closed by peer" with an address, NCCL as a
    communicator error; neither says which rank. The heartbeats say it (checked on failure only).
    """
    try:
        yield
    except RankLostError:
        raise
    except RuntimeError as exc:
        lost = lost_ranks()
        if not lost:
            raise
        detail = "; ".join(f"rank {r}: {why}" for r, why in lost.items())
        raise RankLostError(f"{what} on rank {get_rank()}: lost rank(s) {sorted(lost)} ({detail}); "
                            f"the run cannot go on (backend error: {str(exc).splitlines()[0][:200]})", lost) from exc


class _Work:
    """A point-to-point work handle whose ``wait`` names lost peers (see :func:`_naming_lost_ranks`)."""

    __slots__ = ("work",)

    def __init__(self, work):
        self.work = work

    def wait(self, *args, **kwargs):
        with _naming_lost_ranks("wait on a point-to-point transfer"):
            return self.work.wait(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.work, name)


def _single(group) -> bool:
    return not is_initialized() or get_world_size(group) == 1


def _to_comm(t: torch.Tensor, group) -> torch.Tensor:
    dev = comm_device(group)
    return t if t.device == dev else t.to(dev)


def all_to_all_single(
    input: torch.Tensor,
    output_split_sizes: Optional[Sequence[int]] = None,
    input_split_sizes: Optional[Sequence[int]] = None,
    group=None,
    output: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Uneven all-to-all along dim 0: rank ``r`` sends ``input_split_sizes[j]`` rows to rank ``j``
    and receives ``output_split_sizes[j]`` rows from rank ``j``.

    Args:
        input: ``[sum(input_split_sizes), *]``.
        output_split_sizes: rows received from each rank (``None``: even split).
        input_split_sizes: rows sent to each rank (``None``: even split).
        group: process group (``None``: the default group).
        output: optional preallocated ``[sum(output_split_sizes), *]`` buffer.

    Returns:
        ``[sum(output_split_sizes), *]`` on ``input``'s device.
    """
    input = input.contiguous()
    if _single(group):
        if output is None:
            return input.clone()
        output.copy_(input)
        return output
    rows = sum(output_split_sizes) if output_split_sizes is not None else input.shape[0]
    dev_in = _to_comm(input, group)
    out = torch.empty((rows,) + tuple(input.shape[1:]), dtype=input.dtype, device=dev_in.device)
    with _naming_lost_ranks("all_to_all_single"):
        dist.all_to_all_single(
            out,
            dev_in,
            output_split_sizes=list(map(int, output_split_sizes)) if output_split_sizes is not None else None,
            input_split_sizes=list(map(int, input_split_sizes)) if input_split_sizes is not None else None,
            group=group,
        )
    out = out.to(input.device)
    if output is not None:
        output.copy_(out)
        return output
    return out


def all_gather_into_tensor(input: torch.Tensor, group=None) -> torch.Tensor:
    """Stack every rank's equally shaped ``input`` along a new leading dim.

    Args:
        input: any shape ``S``; the same shape and dtype on every rank.
        group: process group (``None``: the default group).

    Returns:
        ``[W, *S]`` on ``input``'s device; row ``r`` is rank ``r``'s input.
    """
    input = input.contiguous()
    world = get_world_size(group)
    if _single(group):
        return input.unsqueeze(0).clone()
    # gloo wants the output concatenated along dim 0, not stacked: gather flat rows, then view.
    dev_in = _to_comm(input, group).reshape(1, -1)
    out = torch.empty((world, dev_in.shape[1]), dtype=input.dtype, device=dev_in.device)
    with _naming_lost_ranks("all_gather_into_tensor"):
        _all_gather_single(out, dev_in, group=group)
    return out.view((world,) + tuple(input.shape)).to(input.device)


def all_gather_sizes(values: Sequence[int] | torch.Tensor, group=None) -> torch.Tensor:
    """All-gather a short vector of integers (shapes, counts) from every rank.

    Args:
        values: ``k`` integers; every rank must pass the same ``k``.
        group: process group (``None``: the default group).

    Returns:
        CPU ``LongTensor [W, k]``; row ``r`` holds rank ``r``'s values.
    """
    t = torch.as_tensor(values, dtype=torch.int64).reshape(-1)
    return all_gather_into_tensor(t, group).cpu()


def all_gather_object(obj, group=None) -> List:
    """Gather a picklable object from every rank (for metadata only, never for tensor payloads).

    Args:
        obj: any picklable object.
        group: process group (``None``: the default group).

    Returns:
        A list of ``W`` objects, indexed by rank.
    """
    if _single(group):
        return [obj]
    out = [None] * get_world_size(group)
    with _naming_lost_ranks("all_gather_object"):
        dist.all_gather_object(out, obj, group=group)
    return out


def all_reduce(t: torch.Tensor, op=ReduceOp.SUM, group=None) -> torch.Tensor:
    """In-place all-reduce of ``t`` (also returned); not differentiable (see
    :func:`meshshard.distributed.autograd.all_reduce_sum`).

    Args:
        t: any shape; the same shape and dtype on every rank.
        op: a :class:`ReduceOp` (default ``SUM``).
        group: process group (``None``: the default group).
    """
    if _single(group):
        return t
    dev_t = _to_comm(t, group)
    with _naming_lost_ranks("all_reduce"):
        dist.all_reduce(dev_t, op=op, group=group)
    if dev_t is not t:
        t.copy_(dev_t)
    return t


class _ReduceWork:
    """Handle of :func:`all_reduce_async`: ``wait()`` finishes the reduction into the input tensor."""

    __slots__ = ("work", "dev_t", "t")

    def __init__(self, work, dev_t: torch.Tensor, t: torch.Tensor):
        self.work, self.dev_t, self.t = work, dev_t, t

    def wait(self) -> torch.Tensor:
        if self.work is not None:
            with _naming_lost_ranks("all_reduce_async"):
                self.work.wait()
            self.work = None
            if self.dev_t is not self.t:
                self.t.copy_(self.dev_t)
        return self.t


def all_reduce_async(t: torch.Tensor, op=ReduceOp.SUM, group=None) -> _ReduceWork:
    """Start an in-place all-reduce of ``t``; the returned handle's ``wait()`` completes it.

    Overlaps communication with computation (e.g. gradient buckets during backward). Every
    rank must start its async reductions in the same order.

    Args:
        t: any shape; the same shape and dtype on every rank; not to be read before ``wait()``.
        op: a :class:`ReduceOp` (default ``SUM``).
        group: process group (``None``: the default group).

    Returns:
        A handle with ``wait() -> t`` (a no-op handle without a process group).
    """
    if _single(group):
        return _ReduceWork(None, t, t)
    dev_t = _to_comm(t, group)
    with _naming_lost_ranks("all_reduce_async"):
        work = dist.all_reduce(dev_t, op=op, group=group, async_op=True)
    return _ReduceWork(work, dev_t, t)


def broadcast(t: torch.Tensor, src: int = 0, group=None) -> torch.Tensor:
    """In-place broadcast of ``t`` from global rank ``src`` (also returned).

    Args:
        t: any shape; the same shape and dtype on every rank (the receivers' values are overwritten).
        src: global rank that sends.
        group: process group (``None``: the default group).
    """
    if _single(group):
        return t
    dev_t = _to_comm(t, group)
    with _naming_lost_ranks("broadcast"):
        dist.broadcast(dev_t, src=src, group=group)
    if dev_t is not t:
        t.copy_(dev_t)
    return t


def barrier(group=None) -> None:
    """Block until every rank of ``group`` arrives (no-op in a single process).

    Args:
        group: process group (``None``: the default group).
    """
    if not _single(group):
        with _naming_lost_ranks("barrier"):
            dist.barrier(group=group)


def isend(t: torch.Tensor, dst: int, group=None, tag: int = 0):
    """Non-blocking send to global rank ``dst``; returns a work handle.

    Args:
        t: tensor on :func:`comm_device` (CUDA for NCCL); sent as is.
        dst: global rank of the receiver.
        group: process group (``None``: the default group).
        tag: message tag (gloo matches sends and receives by tag).
    """
    return _Work(dist.isend(t.contiguous(), dst=dst, group=group, tag=tag))


def irecv(t: torch.Tensor, src: int, group=None, tag: int = 0):
    """Non-blocking receive into ``t`` from global rank ``src``; returns a work handle.

    Args:
        t: preallocated buffer on :func:`comm_device` with the sender's shape and dtype.
        src: global rank of the sender.
        group: process group (``None``: the default group).
        tag: message tag (gloo matches sends and receives by tag).
    """
    return _Work(dist.irecv(t, src=src, group=group, tag=tag))


def batch_isend_irecv(ops: List[P2POp]) -> list:
    """Start a batch of point-to-point ops; returns their work handles (an empty batch is allowed).

    Args:
        ops: :class:`P2POp` list, tensors on :func:`comm_device`.
    """
    if not ops:
        return []
    with _naming_lost_ranks("batch_isend_irecv"):
        return [_Work(w) for w in dist.batch_isend_irecv(ops)]


def new_group(ranks: Optional[Sequence[int]] = None, **kwargs):
    """Create a sub-group (every rank must call it).

    Args:
        ranks: global ranks of the new group (``None``: all).
        kwargs: passed to :func:`torch.distributed.new_group` (e.g. ``backend``, ``timeout``).
    """
    return dist.new_group(ranks=list(ranks) if ranks is not None else None, **kwargs)
