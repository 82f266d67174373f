"""``index_add`` and ``scatter_add`` (rows summed into their targets by global index) on ShardTensors.

``x.index_add(dim, index, source)`` adds ``source``'s slices along ``dim`` into the rows
``index`` of ``x`` (global indices), as message passing sums edge messages into their target
nodes:

* ``x`` sharded along ``dim`` (the targets): each source row is sent to the rank owning its target
  (one all-to-all of the rows and of their target ids) and added there. ``source`` / ``index`` may
  be sharded along ``dim`` (each rank sends its own rows) or plain (every rank holds all of them and
  adds only the rows whose target it owns). Backward sends each target's gradient back along the
  same routes.
* ``x`` replicated, ``source`` sharded along ``dim``: every rank adds its rows into zeros, and one
  all-reduce sums the ranks' parts (the result is replicated).
* ``dim`` not sharded: row by row, ``source`` laid out like ``x``.

``scatter_add(dim, index, src)`` is the same op when ``index`` is one index per slice broadcast
over the other dims (``index.view(-1, 1).expand_as(src)``, as PyG's ``scatter`` builds it: a
stride-0 view, recognised from its strides alone, so every rank decides alike); an element-wise
scatter index is refused by name. In-place variants rebind the result (same layout as ``x``).
"""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate, Shard, all_gather_sizes
from meshshard.distributed.autograd import all_reduce_sum, all_to_all_v, indexed_all_to_all_v
from meshshard.tensor.shard_tensor import ShardTensor, assign_inplace
from meshshard.tensor.spec import shard_dim_of, shard_dims_of
from meshshard.tensor._ops.index import _check_range, _route
from meshshard.tensor._ops._common import WAY_OUT, align_plain, is_replicated, op_name, reference, register, wrap

__all__ = ["index_add_handler", "scatter_add_handler"]

_IN_PLACE = {torch.Tensor.index_add_, torch.Tensor.scatter_add_}


def _layout_of(t):
    return (t.device_mesh, tuple(t.placements), t._shard_sizes) if isinstance(t, ShardTensor) else None


def _rows_here(func, t, x, dim, what):
    """This rank's rows of ``t`` (index or source) along ``dim``, for ``x``'s layout along it:
    ``(local rows, sharded)``; ``sharded`` says the rows are this rank's own rows of a sharded
    tensor (else every rank holds all of them)."""
    if isinstance(t, ShardTensor):
        sd = shard_dim_of(t.placements)
        if sd is None:
            return t.to_local(), False
        if len(shard_dims_of(t.placements)) > 1 or sd[1] != (0 if what == "index" else dim) or \
                t.device_mesh != x.device_mesh:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with the {what} sharded as {t.placements}; "
                                      f"shard it along dim {dim} like the source rows, on the same mesh, or {WAY_OUT}")
        return t.to_local(), True
    return t, False


def _push_rows(func, x, dim, idx, src, alpha):
    """``x`` sharded along ``dim``: every row of ``src`` added at its target's owner."""
    mesh = x.device_mesh
    m, _ = shard_dim_of(x.placements)
    group, world, coord = mesh.get_group(m), mesh.size(m), mesh.get_local_rank(m)
    sizes = list(x._shard_sizes)
    n = x.shape[dim]
    idx = idx.to(device=x._local_tensor.device, dtype=torch.int64)
    _check_range(func, idx, n, group, world)
    owner, local_row = _route(sizes, idx, False)
    counts = torch.bincount(owner, minlength=world).tolist()
    table = all_gather_sizes(counts, group).tolist() if world > 1 else [counts]
    picks = [torch.nonzero(owner == j).reshape(-1) for j in range(world)]
    if world > 1:
        rows = all_to_all_v(torch.cat([local_row[p] for p in picks]), table, 0, group)
        vals = indexed_all_to_all_v(src, picks, table, dim=dim, group=group)
    else:
        rows, vals = local_row, src
    if alpha != 1:
        vals = vals * alpha
    return x.to_local().index_add(dim, rows, vals)


def _index_add(func, x, dim, index, source, alpha):
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} into a plain tensor with a ShardTensor source or "
                                  f"index; make the target a ShardTensor, or {WAY_OUT}")
    reference(func, [x])
    dim %= max(x.dim(), 1)
    if isinstance(index, ShardTensor) and index.dim() != 1 or not isinstance(index, ShardTensor) and index.dim() > 1:
        raise IndexError(f"{op_name(func)}(): Index is supposed to be a vector")
    sds = shard_dims_of(x.placements)
    sharded_dims = [d for _, d in sds]
    if not sds:  # a replicated target
        if isinstance(source, ShardTensor) and not is_replicated(source):
            src, _ = _rows_here(func, source, x, dim, "source")
            idx, idx_sharded = _rows_here(func, index, x, dim, "index")
            if idx_sharded and list(index._shard_sizes) != list(source._shard_sizes):
                raise ValueError(f"ShardTensor: {op_name(func)}: the index (sizes {index._shard_sizes}) and the "
                                 f"source (sizes {source._shard_sizes}) must be sharded alike")
            if not idx_sharded:
                idx = idx.narrow(0, source.offsets(), src.shape[dim])
            m, _ = shard_dim_of(source.placements)
            part = torch.zeros_like(x.to_local()).index_add(dim, idx, src, alpha=alpha)
            # the ranks' parts summed once (backward: each rank's rows get the replicated gradient)
            return wrap(func, x.to_local() + all_reduce_sum(part, group=x.device_mesh.get_group(m)), x)
        if isinstance(index, ShardTensor) and not is_replicated(index):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} of a replicated tensor with a sharded index "
                                      f"and a replicated source; {WAY_OUT}")
        idx = index.to_local() if isinstance(index, ShardTensor) else index
        src = source.to_local() if isinstance(source, ShardTensor) else source
        return wrap(func, x.to_local().index_add(dim, idx, src, alpha=alpha), x)
    if dim not in sharded_dims:
        # row by row along the sharded dims: the index must reach every rank whole
        if isinstance(index, ShardTensor) and not is_replicated(index):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} along an unsharded dim with a sharded index; "
                                      f"{WAY_OUT}")
        idx = index.to_local() if isinstance(index, ShardTensor) else index
        if isinstance(source, ShardTensor):
            if _layout_of(source) != _layout_of(x):
                raise ValueError(f"ShardTensor: {op_name(func)}: the source ({source.placements}, sizes "
                                 f"{source._shard_sizes}) must be laid out like the target ({x.placements}, sizes "
                                 f"{x._shard_sizes}) along an unsharded dim")
            src = source.to_local()
        else:
            src = align_plain(func, source, x)
        return wrap(func, x.to_local().index_add(dim, idx, src, alpha=alpha), x)
    if len(sds) > 1:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} along dim {dim} of a tensor sharded along several "
                                  f"dims {sharded_dims}; redistribute so that one mesh dim shards it, or {WAY_OUT}")
    src, src_sharded = _rows_here(func, source, x, dim, "source")
    idx, idx_sharded = _rows_here(func, index, x, dim, "index")
    if src_sharded != idx_sharded:
        if src_sharded:  # a plain index over all source rows: each rank takes its rows' indices
            idx = idx.narrow(0, source.offsets(), src.shape[dim])
        else:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a sharded index but a plain source; shard "
                                      f"the source like the index, or {WAY_OUT}")
    elif src_sharded and list(index._shard_sizes) != list(source._shard_sizes):
        raise ValueError(f"ShardTensor: {op_name(func)}: the index (sizes {index._shard_sizes}) and the source "
                         f"(sizes {source._shard_sizes}) must be sharded alike")
    if not src_sharded:
        # every rank holds every source row: each adds the rows whose target it owns
        m, _ = shard_dim_of(x.placements)
        coord, sizes = x.device_mesh.get_local_rank(m), list(x._shard_sizes)
        lo = sum(sizes[:coord])
        idx = idx.to(device=x._local_tensor.device, dtype=torch.int64)
        _check_range(func, idx, x.shape[dim])  # the same index on every rank: every rank raises alike
        mine = torch.nonzero((idx >= lo) & (idx < lo + sizes[coord])).reshape(-1)
        return wrap(func, x.to_local().index_add(dim, idx[mine] - lo, src.index_select(dim, mine), alpha=alpha), x)
    return wrap(func, _push_rows(func, x, dim, idx, src, alpha), x)


def index_add_handler(func, types, args, kwargs):
    """``index_add(x, dim, index, source, alpha=1)`` (and ``Tensor.index_add_``) by global indices."""
    names = ("input", "dim", "index", "source")
    a = dict(zip(names, args))
    a.update({k: v for k, v in kwargs.items() if k != "alpha"})
    alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
    out = _index_add(func, a["input"], a["dim"], a["index"], a["source"], alpha)
    return assign_inplace(a["input"], out) if func in _IN_PLACE else out


def _row_index(func, index, dim):
    """The 1-d index of a scatter index that is one index per slice along ``dim`` broadcast over the
    other dims (stride 0 there), else NotImplementedError."""
    local = index.to_local() if isinstance(index, ShardTensor) else index
    others = [d for d in range(local.dim()) if d != dim]
    if not all(local.stride(d) == 0 or local.shape[d] == 1 for d in others):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with an element-wise index (each element its own "
                                  "target); supported: one index per row broadcast over the other dims "
                                  f"(index.view(-1, 1).expand_as(src)), as PyG's scatter builds it. Use index_add, "
                                  f"or {WAY_OUT}")
    row = local
    for d in sorted(others, reverse=True):
        row = row.select(d, 0)
    if isinstance(index, ShardTensor):
        sd = shard_dim_of(index.placements)
        if sd is not None and sd[1] != dim:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with the index sharded along dim {sd[1]}; "
                                      f"{WAY_OUT}")
        if sd is None:
            return row
        placements = tuple(Shard(0) if isinstance(p, Shard) else Replicate() for p in index.placements)
        return ShardTensor.from_local(row.contiguous(), index.device_mesh, placements,
                                      sharding_shapes=list(index._shard_sizes))
    return row


def scatter_add_handler(func, types, args, kwargs):
    """``scatter_add(x, dim, index, src)`` (and ``Tensor.scatter_add_``) with one index per slice
    along ``dim`` broadcast over the other dims: ``index_add(x, dim, index_row, src)``."""
    names = ("input", "dim", "index", "src")
    a = dict(zip(names, args))
    a.update(kwargs)
    x, dim, index, src = a["input"], a["dim"], a["index"], a["src"]
    if isinstance(x, ShardTensor):
        dim %= max(x.dim(), 1)
    src_shape = src.shape
    if tuple(index.shape) != tuple(src_shape):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with an index of shape {tuple(index.shape)} and a "
                                  f"source of shape {tuple(src_shape)}: supported when they match; {WAY_OUT}")
    out = _index_add(func, x, dim, _row_index(func, index, dim), src, 1)
    return assign_inplace(x, out) if func in _IN_PLACE else out


register(index_add_handler, (torch.index_add, torch.Tensor.index_add, torch.Tensor.index_add_))
register(scatter_add_handler, (torch.scatter_add, torch.Tensor.scatter_add, torch.Tensor.scatter_add_))
