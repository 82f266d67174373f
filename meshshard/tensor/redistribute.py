"""Placement changes of uneven shards, on local tensors (differentiable).

:meth:`meshshard.tensor.ShardTensor.redistribute` wraps :func:`redistribute_local`; this module
works on plain local tensors and knows nothing of the ShardTensor class.

Built on the variable-size collectives of :mod:`meshshard.distributed.autograd`. Gradient
convention: a replicated tensor's gradient is the full gradient, identical on every rank; a
sharded tensor's gradient is each rank's own rows.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from meshshard.distributed import Partial, Replicate, Shard
from meshshard.distributed.autograd import all_gather_v, all_reduce_sum, all_to_all_v, reduce_scatter_v
from meshshard.tensor.spec import sizes_by_mesh_dim

__all__ = ["redistribute_local"]


def _offsets(sizes: Sequence[int]) -> List[int]:
    out, acc = [], 0
    for s in sizes:
        out.append(acc)
        acc += int(s)
    return out


class _GatherToReplicate(torch.autograd.Function):
    """Shard -> Replicate: all-gather-v forward; backward keeps this rank's slice of the
    (replicated, identical) gradient."""

    @staticmethod
    def forward(ctx, local, sizes, dim, group, coord):
        ctx.args = (dim, _offsets(sizes)[coord], sizes[coord])
        return all_gather_v(local, sizes, dim=dim, group=group)

    @staticmethod
    def backward(ctx, grad):
        dim, start, length = ctx.args
        return grad.narrow(dim, start, length).contiguous(), None, None, None, None


class _SliceFromReplicate(torch.autograd.Function):
    """Replicate -> Shard: keep this rank's slice; backward all-gathers the shards' gradients into
    the full gradient of the replicated input."""

    @staticmethod
    def forward(ctx, local, sizes, dim, group, coord):
        ctx.args = (list(sizes), dim, group)
        return local.narrow(dim, _offsets(sizes)[coord], sizes[coord]).clone()

    @staticmethod
    def backward(ctx, grad):
        sizes, dim, group = ctx.args
        return all_gather_v(grad.contiguous(), sizes, dim=dim, group=group), None, None, None, None


def _rebalance(local, old: Sequence[int], new: Sequence[int], dim: int, group, coord: int):
    """Move rows along ``dim`` from layout ``old`` to layout ``new``: each rank sends every other
    rank the overlap of its rows with that rank's new range (all-to-all-v, only moving rows)."""
    o_old, o_new = _offsets(old), _offsets(new)
    w = len(old)
    mat = [[max(0, min(o_old[r] + old[r], o_new[s] + new[s]) - max(o_old[r], o_new[s])) for s in range(w)]
           for r in range(w)]
    return all_to_all_v(local.contiguous(), mat, dim=dim, group=group)


def _shard_to_shard(local, old: Sequence[int], i: int, new: Sequence[int], j: int, group, coord: int):
    """Shard(i) -> Shard(j): rank r sends rank s its rows (along i) restricted to s's columns
    (along j), flattened, through one all-to-all-v."""
    w = len(old)
    shape = list(local.shape)
    other = 1
    for k, v in enumerate(shape):
        if k not in (i, j):
            other *= v
    o_new = _offsets(new)
    pieces = [local.narrow(j, o_new[s], new[s]).reshape(-1) for s in range(w)]
    send = torch.cat(pieces) if pieces else local.reshape(-1)
    mat = [[old[r] * new[s] * other for s in range(w)] for r in range(w)]
    recv = all_to_all_v(send, mat, dim=0, group=group)
    chunks = torch.split(recv, [mat[r][coord] for r in range(w)])
    parts = []
    for r in range(w):
        piece_shape = list(shape)
        piece_shape[i], piece_shape[j] = old[r], new[coord]
        parts.append(chunks[r].reshape(piece_shape))
    return torch.cat(parts, dim=i)


class _ReplicateToPartial(torch.autograd.Function):
    """Replicate -> Partial: coordinate 0 keeps the value, the others hold zeros (exact sum);
    backward passes the gradient through (a Partial tensor's gradient is replicated)."""

    @staticmethod
    def forward(ctx, local, coord):
        return local.clone() if coord == 0 else torch.zeros_like(local)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def _free(cur, m: int, dim: int) -> bool:
    """True when no mesh dim other than ``m`` shards tensor dim ``dim``."""
    return not any(isinstance(p, Shard) and p.dim == dim for k, p in enumerate(cur) if k != m)


def redistribute_local(local: torch.Tensor, mesh, src_placements, src_sizes, dst_placements, dst_sizes) -> torch.Tensor:
    """Change the layout of this rank's ``local`` tensor; differentiable when grad is enabled.

    Sizes are ``_shard_sizes`` values (flat for one sharding mesh dim, one entry per mesh dim for
    several). First every mesh dim leaves its placement: straight to its target when that is a
    Shard of a dim no other mesh dim shards (all-to-all-v, reduce-scatter-v, rebalance), else to
    Replicate (all-gather-v, all-reduce); then the Replicate mesh dims take their targets (local
    slice, or Partial). Each step works on one mesh dim's group, whose ranks share every other
    sharded dim's size.
    """
    cur = list(src_placements)
    cs = list(sizes_by_mesh_dim(src_placements, src_sizes))
    ds = sizes_by_mesh_dim(dst_placements, dst_sizes)
    for m in range(mesh.ndim):
        a, b = cur[m], dst_placements[m]
        group, coord = mesh.get_group(m), mesh.get_local_rank(m)
        if a == b and (not isinstance(a, Shard) or list(cs[m]) == list(ds[m])):
            continue
        if isinstance(a, Shard) and isinstance(b, Shard) and a.dim == b.dim:
            local = _rebalance(local, cs[m], ds[m], a.dim, group, coord)
        elif isinstance(b, Shard) and _free(cur, m, b.dim) and isinstance(a, Partial):
            local = reduce_scatter_v(local, list(ds[m]), dim=b.dim, group=group)
        elif isinstance(b, Shard) and _free(cur, m, b.dim) and isinstance(a, Shard):
            local = _shard_to_shard(local, cs[m], a.dim, ds[m], b.dim, group, coord)
        elif isinstance(a, Shard):
            local = _GatherToReplicate.apply(local, list(cs[m]), a.dim, group, coord)
            b = Replicate()
        elif isinstance(a, Partial) and not isinstance(b, Partial):
            local = all_reduce_sum(local, group=group)
            b = Replicate()
        else:
            continue  # Replicate: takes its target below
        cur[m], cs[m] = b, (ds[m] if isinstance(b, Shard) else None)
    for m in range(mesh.ndim):
        a, b = cur[m], dst_placements[m]
        if a == b:
            continue
        group, coord = mesh.get_group(m), mesh.get_local_rank(m)
        if isinstance(a, Replicate) and isinstance(b, Shard):
            local = _SliceFromReplicate.apply(local, list(ds[m]), b.dim, group, coord)
        elif isinstance(a, Replicate) and isinstance(b, Partial):
            local = _ReplicateToPartial.apply(local, coord)
        else:
            raise NotImplementedError(f"ShardTensor.redistribute: {a} -> {b} on mesh dim {m} is not supported")
        cur[m] = b
    return local
