"""Placement changes of a ShardTensor with uneven shards (differentiable).

Built on the variable-size collectives of :mod:`meshshard.distributed.autograd`. Gradient
convention: a replicated tensor's gradient is the full gradient, identical on every rank; a
sharded tensor's gradient is each rank's own rows.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

from meshshard.distributed import Partial, Replicate, Shard
from meshshard.distributed.agree import get_validation, validation
from meshshard.distributed.autograd import all_gather_v, all_reduce_sum, all_to_all_v, reduce_scatter_v
from meshshard.tensor.spec import (chunk_sizes, layout_signature, normalize_placements, resolve_sharding_shapes,
                                   shard_dim_of)

__all__ = ["redistribute", "redistribute_local"]


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


def redistribute_local(local: torch.Tensor, mesh, src_placements, src_sizes, dst_placements, dst_sizes) -> torch.Tensor:
    """Change the layout of this rank's ``local`` tensor; differentiable when grad is enabled.

    Mesh dims whose target is not Shard are handled first, so at most one mesh dim shards the
    tensor at any time.
    """
    cur = list(src_placements)
    cur_sizes = None if src_sizes is None else list(src_sizes)
    order = [m for m in range(mesh.ndim) if not isinstance(dst_placements[m], Shard)]
    order += [m for m in range(mesh.ndim) if isinstance(dst_placements[m], Shard)]
    for m in order:
        a, b = cur[m], dst_placements[m]
        group, coord = mesh.get_group(m), mesh.get_local_rank(m)
        if isinstance(a, Shard) and isinstance(b, Shard) and a.dim == b.dim:
            if list(cur_sizes) != list(dst_sizes):
                local = _rebalance(local, cur_sizes, dst_sizes, a.dim, group, coord)
                cur_sizes = list(dst_sizes)
        elif a == b:
            pass
        elif isinstance(a, Partial) and isinstance(b, Replicate):
            local = all_reduce_sum(local, group=group)
        elif isinstance(a, Partial) and isinstance(b, Shard):
            local = reduce_scatter_v(local, dst_sizes, dim=b.dim, group=group)
            cur_sizes = list(dst_sizes)
        elif isinstance(a, Shard) and isinstance(b, Replicate):
            local = _GatherToReplicate.apply(local, list(cur_sizes), a.dim, group, coord)
            cur_sizes = None
        elif isinstance(a, Replicate) and isinstance(b, Shard):
            local = _SliceFromReplicate.apply(local, list(dst_sizes), b.dim, group, coord)
            cur_sizes = list(dst_sizes)
        elif isinstance(a, Shard) and isinstance(b, Shard):
            local = _shard_to_shard(local, cur_sizes, a.dim, dst_sizes, b.dim, group, coord)
            cur_sizes = list(dst_sizes)
        else:
            raise NotImplementedError(f"ShardTensor.redistribute: {a} -> {b} on mesh dim {m} is not supported")
        cur[m] = b
    return local


def redistribute(st, placements=None, sharding_shapes=None):
    """See :meth:`meshshard.tensor.ShardTensor.redistribute`."""
    from meshshard.tensor.shard_tensor import _FromLocal

    mesh = st.device_mesh
    target = normalize_placements(st.placements if placements is None else placements, mesh)
    target = tuple(Shard(p.dim % st.dim()) if isinstance(p, Shard) and p.dim < 0 else p for p in target)
    dst_sd, src_sd = shard_dim_of(target), shard_dim_of(st.placements)
    new_sizes = None
    checked = False
    if dst_sd is not None:
        m, d = dst_sd
        if d >= st.dim():
            raise ValueError(f"redistribute: Shard({d}) of a {st.dim()}-d tensor")
        if sharding_shapes is not None:
            # One exchange checks on every rank alike the new layout (sum, agreement) and the tensor
            # (dtype, features, placements, current sizes), so a bad layout on one rank cannot hang
            # the others, and the collectives below need no check of their own.
            checked = get_validation() and mesh.size() > 1
            new_sizes = resolve_sharding_shapes("redistribute", sharding_shapes, mesh, target, total=st.shape[d],
                                                signature=layout_signature(st._local_tensor, mesh, st.placements,
                                                                           st._shard_sizes))
        elif src_sd == dst_sd:
            new_sizes = list(st._shard_sizes)
        else:
            new_sizes = chunk_sizes(st.shape[d], mesh.size(m))
    local = st.to_local()
    with validation(not checked and get_validation()):  # checked above already: no second check
        local = redistribute_local(local, mesh, st.placements, st._shard_sizes, target, new_sizes)
    return _FromLocal.apply(local, mesh, target, None if new_sizes is None else tuple(new_sizes))
