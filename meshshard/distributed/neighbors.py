"""Fetch ranges of rows of a tensor sharded unevenly along one dim (halo exchange, differentiable).

Every rank states the global row ranges it needs; every rank computes the same list from the
shard sizes and the op's parameters (no extra communication), so one variable-size all-to-all
moves exactly the requested rows: for a stencil that is the halo from the neighbours, for a thin
shard it reaches as far as needed. A rank's own rows never go through the collective. Backward is the
adjoint: the transposed all-to-all, each row's gradients added at its owner (a row sent to several
ranks gets the sum of theirs), with buffers the size of the moved rows only; the two maps are each other's backward, so higher derivatives work too.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch

from meshshard.distributed.autograd import all_to_all_v
from meshshard.distributed.process_group import get_rank, get_world_size

__all__ = ["fetch_ranges", "range_message_sizes"]

Ranges = Sequence[Tuple[int, int]]


def _clip(a: int, b: int, lo: int, hi: int) -> Tuple[int, int]:
    a, b = max(a, lo), min(b, hi)
    return a, max(a, b)


def range_message_sizes(sizes: Sequence[int], ranges: Sequence[Ranges]) -> List[List[int]]:
    """Rows every rank sends to every rank for :func:`fetch_ranges`.

    Args:
        sizes: shard size of every rank along the dim (``W`` ints).
        ranges: for every rank, its list of global ``(start, stop)`` row ranges.

    Returns:
        ``W x W`` list; ``[i][j]`` = rows rank ``i`` sends to rank ``j`` (the sum of the
        intersections of ``i``'s rows with ``j``'s ranges).
    """
    offs = [sum(sizes[:r]) for r in range(len(sizes))]
    return [[sum(b - a for a, b in (_clip(s, e, offs[i], offs[i] + sizes[i]) for s, e in ranges[j]))
             for j in range(len(sizes))] for i in range(len(sizes))]


def fetch_ranges(local: torch.Tensor, sizes: Sequence[int], ranges: Sequence[Ranges], dim: int = 0,
                 group=None) -> torch.Tensor:
    """Rows ``ranges[rank]`` of the global tensor whose shards along ``dim`` are every rank's ``local``.

    Args:
        local: this rank's shard, ``sizes[rank]`` rows along ``dim``.
        sizes: every rank's shard size along ``dim`` (the same list on every rank).
        ranges: for every rank, the global ``(start, stop)`` ranges it needs, each inside
            ``[0, sum(sizes))``; the same nested list on every rank.
        dim: the sharded dim.
        group: process group (``None``: the default group).

    Returns:
        The requested rows concatenated in the order of ``ranges[rank]``:
        ``sum(stop - start)`` rows along ``dim``, the other dims as in ``local``.
        Backward sends the gradients of the fetched rows back to their owners and adds them.
    """
    world, rank = get_world_size(group), get_rank(group)
    n = sum(sizes)
    if len(sizes) != world or len(ranges) != world:
        raise ValueError(f"fetch_ranges: {len(sizes)} sizes and {len(ranges)} range lists for {world} ranks")
    if local.shape[dim] != sizes[rank]:
        raise ValueError(f"fetch_ranges: local has {local.shape[dim]} rows along dim {dim}, sizes[{rank}]={sizes[rank]}")
    for q, rs in enumerate(ranges):
        for a, b in rs:
            if not 0 <= a <= b <= n:
                raise ValueError(f"fetch_ranges: range ({a}, {b}) of rank {q} is outside [0, {n}]")
    plan = _plan(sizes, ranges, rank, world)
    return _Fetch.apply(local, plan, dim, group)


class _Plan:
    """What :func:`fetch_ranges` moves, computed once per call.

    ``sends``: this rank's blocks for the other ranks (local offset, rows), in destination-then-range
    order; ``mat``: the ``W x W`` message sizes without the diagonal (a rank's own rows never go
    through the collective); ``pieces``: the window's pieces in range order, each ``(own, offset,
    rows)``: a slice of this rank's rows (``own``) or of the received tensor.
    """

    def __init__(self, sends, mat, pieces):
        self.sends, self.mat, self.pieces = sends, mat, pieces
        self.mat_t = [list(r) for r in zip(*mat)]
        self.recv_rows = sum(n for own, _, n in pieces if not own)
        self.exchange = any(v for row in mat for v in row)  # the same on every rank


def _plan(sizes, ranges, rank: int, world: int) -> _Plan:
    offs = [sum(sizes[:r]) for r in range(world)]
    mine = (offs[rank], offs[rank] + sizes[rank])
    sends = []
    for q in range(world):  # blocks grouped by destination, each in the destination's range order
        if q == rank:
            continue
        for a, b in ranges[q]:
            a, b = _clip(a, b, *mine)
            if b > a:
                sends.append((a - mine[0], b - a))
    pieces, cursor = {}, 0
    for p in range(world):  # the received blocks come grouped by source rank
        src = (offs[p], offs[p] + sizes[p])
        for k, (a, b) in enumerate(ranges[rank]):
            a, b = _clip(a, b, *src)
            if b > a:
                if p == rank:
                    pieces[(k, p)] = (True, a - mine[0], b - a)
                else:
                    pieces[(k, p)] = (False, cursor, b - a)
                    cursor += b - a
    mat = range_message_sizes(sizes, ranges)
    for r in range(world):
        mat[r][r] = 0
    return _Plan(sends, mat, [pieces[key] for key in sorted(pieces)])


def _gather_rows(local: torch.Tensor, plan: _Plan, dim: int, group) -> torch.Tensor:
    """The forward map: the requested rows, in range order."""
    recv = None
    if plan.exchange:
        sends = [local.narrow(dim, o, n) for o, n in plan.sends]
        send = torch.cat(sends, dim) if sends else local.narrow(dim, 0, 0)
        recv = all_to_all_v(send.contiguous(), plan.mat, dim=dim, group=group)
    parts = [(local if own else recv).narrow(dim, o, n) for own, o, n in plan.pieces]
    if not parts:
        return local.narrow(dim, 0, 0).clone()
    return torch.cat(parts, dim) if len(parts) > 1 else parts[0].clone()


def _scatter_rows(grad: torch.Tensor, plan: _Plan, dim: int, group, local_shape) -> torch.Tensor:
    """The adjoint map: each requested row's gradient added at its owner (own rows in place, the
    others sent back through the transposed exchange)."""
    out = grad.new_zeros(local_shape)
    recv = None
    if plan.exchange:
        shape = list(grad.shape)
        shape[dim] = plan.recv_rows
        recv = grad.new_empty(shape)
    at = 0
    for own, o, n in plan.pieces:
        piece = grad.narrow(dim, at, n)
        at += n
        if own:
            out.narrow(dim, o, n).add_(piece)
        else:
            recv.narrow(dim, o, n).copy_(piece)
    if plan.exchange:
        send = all_to_all_v(recv, plan.mat_t, dim=dim, group=group)
        at = 0
        for o, n in plan.sends:
            out.narrow(dim, o, n).add_(send.narrow(dim, at, n))
            at += n
    return out


class _Fetch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, local, plan, dim, group):
        ctx.plan, ctx.dim, ctx.group, ctx.local_shape = plan, dim, group, local.shape
        return _gather_rows(local, plan, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _FetchAdjoint.apply(grad, ctx.plan, ctx.dim, ctx.group, ctx.local_shape), None, None, None


class _FetchAdjoint(torch.autograd.Function):
    @staticmethod
    def forward(ctx, grad, plan, dim, group, local_shape):
        ctx.plan, ctx.dim, ctx.group = plan, dim, group
        return _scatter_rows(grad, plan, dim, group, local_shape)

    @staticmethod
    def backward(ctx, g):
        return _Fetch.apply(g, ctx.plan, ctx.dim, ctx.group), None, None, None, None
