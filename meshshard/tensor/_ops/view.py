"""Shape ops (``view`` / ``reshape`` / ``flatten`` / ``unflatten`` / ``squeeze`` / ``unsqueeze`` /
``view_as`` / ``reshape_as`` / ``expand`` / ``expand_as``, ``movedim``): local, no communication.

A reshape keeps the layout only when every rank's rows stay one contiguous block of the result:
the sharded dim may merge with the dims after it (``flatten``: shard sizes multiply) or split
into dims whose trailing product divides every rank's block (``unflatten`` with even pieces);
anything else (merging with a dim before it, splitting a shard unevenly) raises
NotImplementedError saying why. With several sharded dims (several mesh dims) each one follows
that rule on its own and must land in a dim of its own.
"""
from __future__ import annotations

import math

import torch

from meshshard.distributed import Shard
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import pack_sizes, shard_dim_of, shard_dims_of, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, op_name, reference, register, wrap
from meshshard.tensor._ops.permute import permute_handler

__all__ = ["reshape_handler", "expand_handler", "resharded_view"]


def resharded_view(func, shape, placements, sizes, target):
    """Where the sharded dim and every rank's shard go when a tensor is reshaped.

    Args:
        func: the op, for messages.
        shape: global input shape.
        placements: input placements (one Shard).
        sizes: input shard sizes along the sharded dim, one per rank of the sharding mesh dim.
        target: global output shape (no ``-1``).

    Returns:
        ``(out_dim, out_sizes)``: the output's sharded dim and its shard sizes. Rank ``r``'s rows
        ``[o_r, o_r + n_r)`` of dim ``d`` are, within each block of the outer dims, the flat range
        ``[o_r * P, (o_r + n_r) * P)`` (``P``: product of the dims after ``d``); they stay one block
        of output dim ``s`` when the output dims before ``s`` multiply to the same outer size and
        the product ``Q`` of those after ``s`` divides every ``o_r * P`` and ``n_r * P``.
    """
    _, d = shard_dim_of(placements)
    return _resharded_dim(func, shape, d, sizes, target)


def _resharded_dim(func, shape, d, sizes, target):
    """:func:`resharded_view` for the sharded dim ``d`` (the other dims taken whole)."""
    outer, inner = math.prod(shape[:d]), math.prod(shape[d + 1:])
    offsets = [sum(sizes[:r]) for r in range(len(sizes))]
    candidates = [s for s in range(len(target)) if math.prod(target[:s]) == outer]
    for s in reversed(candidates):  # the last one skips size-1 dims inserted before the shard
        q = math.prod(target[s + 1:])
        if q == 0:
            if inner == 0 and target[s] == shape[d]:
                return s, list(sizes)
            continue
        if all((o * inner) % q == 0 and (n * inner) % q == 0 for o, n in zip(offsets, sizes)):
            return s, [n * inner // q for n in sizes]
    raise NotImplementedError(
        f"ShardTensor: {op_name(func)} from {tuple(shape)} (sharded along dim {d}, shard sizes {list(sizes)}) "
        f"to {tuple(target)}: some rank's rows would not stay one contiguous block of the result (the sharded "
        "dim may merge only with the dims after it, and split only into pieces that divide every rank's "
        f"shard); {WAY_OUT}")


def _wrap_as(local, x, placements, sizes):
    return _FromLocal.apply(local, x.device_mesh, placements, None if sizes is None else tuple(sizes))


def _target_shape(func, x, rest, kwargs):
    """The op's global output shape, found by running it on a meta tensor of the global shape."""
    if func in _AS:
        other = rest[0] if rest else kwargs["other"]
        return tuple(other.shape)
    probe = torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    return tuple(func(probe, *rest, **kwargs).shape)


def reshape_handler(func, types, args, kwargs):
    """``view`` / ``reshape`` / ``flatten`` / ``unflatten`` / ``squeeze`` / ``unsqueeze`` /
    ``view_as`` / ``reshape_as``: a local reshape of every rank's shard (see
    :func:`resharded_view` for when the sharded dim can take part)."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; {WAY_OUT}")
    rest = tuple(args[1:])
    kw = {k: v for k, v in kwargs.items() if k != "input"}
    reference(func, [x])  # refuses Partial
    if func is torch.Tensor.view and (isinstance(rest[0] if rest else None, torch.dtype) or "dtype" in kw):
        dtype = rest[0] if rest else kw["dtype"]
        if dtype.itemsize != x.dtype.itemsize and shard_dim_of(x.placements) is not None:
            raise NotImplementedError(f"ShardTensor: view as {dtype} changes the element size and so the last "
                                      f"dim of every shard; {WAY_OUT}")
        return wrap(func, x.to_local().view(dtype), x)
    target = _target_shape(func, x, rest, kw)
    sds = shard_dims_of(x.placements)
    if not sds:
        return _wrap_as(x.to_local().reshape(target), x, x.placements, None)
    # Several sharded dims: each must go to its own output dim by the rule of resharded_view;
    # each then starts a block of dims whose product the reshape keeps, so the blocks reshape
    # independently and every rank's local box stays a box of the result.
    per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
    local_shape, placements, out_sizes = list(target), list(x.placements), list(per_dim)
    for m, d in sds:
        s, sizes = _resharded_dim(func, tuple(x.shape), d, list(per_dim[m]), target)
        if any(isinstance(p, Shard) and p.dim == s for p in placements[:m]):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} from {tuple(x.shape)} to {tuple(target)} would "
                                      f"merge two sharded dims ({x.placements}) into dim {s}; {WAY_OUT}")
        local_shape[s] = sizes[x.device_mesh.get_local_rank(m)]
        placements[m], out_sizes[m] = Shard(s), sizes
    placements = tuple(placements)
    return _wrap_as(x.to_local().reshape(local_shape), x, placements, pack_sizes(placements, out_sizes))


def expand_handler(func, types, args, kwargs):
    """``expand`` / ``expand_as`` / ``broadcast_to``: new leading dims and size-1 dims broadcast
    locally; the sharded dim keeps its size (expanding it would need rows of other ranks)."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; {WAY_OUT}")
    rest = tuple(args[1:])
    kw = {k: v for k, v in kwargs.items() if k != "input"}
    reference(func, [x])
    if func is torch.Tensor.expand_as:
        target = tuple((rest[0] if rest else kw["other"]).shape)
    else:
        probe = torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
        target = tuple(func(probe, *rest, **kw).shape)
    sds = shard_dims_of(x.placements)
    if not sds:
        return _wrap_as(x.to_local().expand(target), x, x.placements, None)
    shift = len(target) - x.dim()
    per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
    local_shape = list(target)
    for m, d in sds:
        if target[d + shift] != x.shape[d]:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} of {tuple(x.shape)} to {target} would expand "
                                      f"the sharded dim {d}; {WAY_OUT}")
        local_shape[d + shift] = per_dim[m][x.device_mesh.get_local_rank(m)]
    placements = tuple(Shard(p.dim + shift) if isinstance(p, Shard) else p for p in x.placements)
    return _wrap_as(x.to_local().expand(local_shape), x, placements, x._shard_sizes)


_AS = {torch.Tensor.view_as, torch.Tensor.reshape_as}

register(reshape_handler, (torch.Tensor.view, torch.reshape, torch.Tensor.reshape, torch.flatten,
                           torch.Tensor.flatten, torch.unflatten, torch.Tensor.unflatten, torch.squeeze,
                           torch.Tensor.squeeze, torch.unsqueeze, torch.Tensor.unsqueeze, torch.Tensor.view_as,
                           torch.Tensor.reshape_as, torch.ravel, torch.Tensor.ravel))
register(expand_handler, (torch.Tensor.expand, torch.Tensor.expand_as, torch.broadcast_to,
                          torch.Tensor.broadcast_to))
# movedim is a dim permutation: the permute family moves the Shard dim along with it.
register(permute_handler, (torch.movedim, torch.Tensor.movedim, torch.moveaxis, torch.Tensor.moveaxis))
