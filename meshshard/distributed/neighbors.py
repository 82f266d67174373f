"""Fetch ranges of rows of a tensor sharded unevenly along one dim (halo exchange, differentiable).

Every rank states the global row ranges it needs; every rank computes the same list from the
shard sizes and the op's parameters (no extra communication), so one variable-size all-to-all
moves exactly the requested rows: for a stencil that is the halo from the neighbours, for a thin
shard it reaches as far as needed. Backward is the transposed all-to-all; a row sent to several
ranks gets the sum of their gradients (autograd of the sends' ``narrow``/``cat``).
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
    offs = [sum(sizes[:r]) for r in range(world)]
    mine = (offs[rank], offs[rank] + sizes[rank])
    sends = []
    for q in range(world):  # blocks grouped by destination, each in the destination's range order
        for a, b in ranges[q]:
            a, b = _clip(a, b, *mine)
            if b > a:
                sends.append(local.narrow(dim, a - mine[0], b - a))
    send = torch.cat(sends, dim) if sends else local.narrow(dim, 0, 0)
    mat = range_message_sizes(sizes, ranges)
    recv = all_to_all_v(send, mat, dim=dim, group=group) if world > 1 else send
    # recv is grouped by source rank; put the pieces back in range order
    pieces, cursor = {}, 0
    for p in range(world):
        src = (offs[p], offs[p] + sizes[p])
        for k, (a, b) in enumerate(ranges[rank]):
            a, b = _clip(a, b, *src)
            if b > a:
                pieces[(k, p)] = recv.narrow(dim, cursor, b - a)
                cursor += b - a
    ordered = [pieces[key] for key in sorted(pieces)]
    if len(ordered) == 1:
        return ordered[0]
    return torch.cat(ordered, dim) if ordered else recv.narrow(dim, 0, 0)
