"""Indexing: ``x[...]`` with ints / slices / ``None`` / ``...``, ``select``, ``narrow``,
``split`` / ``chunk`` / ``unbind``, and ``index_select`` / ``gather`` by global indices.

On unsharded dims everything is local and the layout is kept (the Shard dim moves when dims
before it appear or vanish). On the sharded dim:

* a slice ``x[a:b:s]`` keeps on every rank the global rows in ``[a, b)`` step ``s`` that it owns;
  every rank computes every rank's new size from the known shard sizes (no communication);
  ``narrow`` / ``split`` / ``chunk`` are such slices;
* an int (``x[i]``, ``select``) returns the row replicated: its owner contributes it to one
  all-reduce (backward: the owner gets the replicated gradient, exact);
* ``index_select`` / ``gather`` fetch the requested rows (elements) from their owners with
  :func:`meshshard.distributed.autograd.indexed_all_to_all_v` (backward sums repeated picks).
  With a sharded index ShardTensor the result is laid out like the index; with a plain
  (replicated) index it is sharded along the indexed dim in the ``torch.chunk`` layout of the
  index, as PhysicsNeMo's ``index_select`` redistributes it.

A tensor sharded along several dims by several mesh dims (an image split in height and width)
takes ints and slices on every dim (each sharded dim as above, inside its mesh dim), ``split`` /
``chunk`` / ``unbind`` as above, and ``index_select`` / ``gather`` along an unsharded dim with a
plain index; ``index_select`` / ``gather`` along one of its sharded dims are refused by name.
"""
from __future__ import annotations

import operator

import torch

from meshshard.distributed import Partial, Replicate, Shard, all_gather_sizes
from meshshard.distributed.autograd import all_reduce_sum, all_to_all_v, indexed_all_to_all_v
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import chunk_sizes, pack_sizes, shard_dim_of, shard_dims_of, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, align_plain, is_replicated, op_name, reference, register, wrap

__all__ = ["getitem_handler", "select_handler", "narrow_handler", "split_handler", "unbind_handler",
           "index_select_handler", "gather_handler", "fetch_rows"]


def _offsets(sizes):
    return [sum(sizes[:r]) for r in range(len(sizes))]


def _as_int(v):
    """``v`` as an int index, or ``None`` when it is not one (bools index like masks)."""
    if isinstance(v, bool) or (isinstance(v, torch.Tensor) and (v.dim() != 0 or v.is_floating_point()
                                                                or v.dtype == torch.bool)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _expand_key(key, ndim):
    """``key`` as a tuple of ints, slices and ``None`` with ``...`` expanded; ``None`` when it holds
    anything else (tensors, lists, bools: advanced indexing)."""
    key = key if isinstance(key, tuple) else (key,)
    items = []
    for k in key:
        if k is None or k is Ellipsis or isinstance(k, slice):
            items.append(k)
        else:
            i = _as_int(k)
            if i is None:
                return None
            items.append(i)
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    if Ellipsis in items:
        if items.count(Ellipsis) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (ndim - used)
        return items
    return items + [slice(None)] * (ndim - used)


def _slice_rows(sl: slice, n_global: int, sizes):
    """Per rank: the local slice and the count of the global rows ``range(*sl.indices(N))`` it owns."""
    start, stop, step = sl.indices(n_global)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    local, counts = [], []
    for o, n in zip(_offsets(sizes), sizes):
        lo, hi = max(start, o), min(stop, o + n)
        first = start + -(-(lo - start) // step) * step if lo > start else start
        count = len(range(first, hi, step)) if first < hi else 0
        local.append(slice(first - o, hi - o, step) if count else slice(0, 0))
        counts.append(count)
    return local, counts


def _index_sharded(func, x, items):
    """``x[items]`` (ints / slices / None, one per dim plus inserted dims) of a sharded ``x``
    (sharded along one dim or, by several mesh dims, along several)."""
    mesh = x.device_mesh
    by_dim = {d: m for m, d in shard_dims_of(x.placements)}
    per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
    placements, new_sizes = list(x.placements), list(per_dim)
    local_items, in_dim, out_dim, picked = [], 0, 0, []
    for k in items:
        if k is None:
            local_items.append(None)
            out_dim += 1
            continue
        if in_dim in by_dim:
            m = by_dim[in_dim]
            sizes, coord, n_global = list(per_dim[m]), mesh.get_local_rank(m), x.shape[in_dim]
            if isinstance(k, slice):
                local, new_sizes[m] = _slice_rows(k, n_global, sizes)
                local_items.append(local[coord])
                placements[m] = Shard(out_dim)
            else:
                i = k + n_global if k < 0 else k
                if not 0 <= i < n_global:
                    raise IndexError(f"index {k} is out of bounds for dimension {in_dim} with size {n_global}")
                o = _offsets(sizes)[coord]
                local_items.append(slice(i - o, i - o + 1) if o <= i < o + sizes[coord] else slice(0, 0))
                picked.append((m, out_dim))
            out_dim += 1
        else:
            if not isinstance(k, slice) and not -x.shape[in_dim] <= k < x.shape[in_dim]:
                raise IndexError(f"index {k} is out of bounds for dimension {in_dim} with size {x.shape[in_dim]}")
            local_items.append(k)
            out_dim += isinstance(k, slice)
        in_dim += 1
    y = x.to_local()[tuple(local_items)]
    for m, at in picked:
        # Only the owner holds the row; the others of the mesh dim contribute zeros to one all-reduce.
        if y.shape[at] == 0:
            pad = list(y.shape)
            pad[at] = 1
            y = torch.cat([y, y.new_zeros(pad)], at)
        y = all_reduce_sum(y, group=mesh.get_group(m))
        placements[m], new_sizes[m] = Replicate(), None
    for _, at in sorted(picked, key=lambda p: -p[1]):
        y = y.select(at, 0)
        placements = [Shard(p.dim - 1) if isinstance(p, Shard) and p.dim > at else p for p in placements]
    placements = tuple(placements)
    return _FromLocal.apply(y, mesh, placements, pack_sizes(placements, new_sizes))


def getitem_handler(func, types, args, kwargs):
    """``x[key]`` with ints, slices (positive step), ``None`` and ``...`` on any dim; ``x[idx]`` with a
    1-d integer tensor (plain or ShardTensor) of global rows is ``index_select(x, 0, idx)``, and so
    are ``x[idx, :]`` and ``x[idx, ...]`` (full slices after it); ``x[idx]`` with a key of more dims
    (kNN ids ``[N, k]``) gives rows shaped ``idx.shape + x.shape[1:]`` (:func:`_take_rows`). Other
    tensor / list / bool keys (advanced indexing) run only on replicated tensors."""
    x, key = args[0], args[1]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as the index; {WAY_OUT}")
    reference(func, [x])
    if isinstance(key, tuple) and key and isinstance(key[0], torch.Tensor) and all(
            k is Ellipsis or (isinstance(k, slice) and k == slice(None)) for k in key[1:]):
        key = key[0]  # x[idx, :] / x[idx, ...] (as point-cloud codes write a row gather) is x[idx]
    if (isinstance(key, torch.Tensor) and key.dim() == 1 and not key.is_floating_point() and key.dtype != torch.bool
            and not (is_replicated(x) and not isinstance(key, ShardTensor))):
        return index_select_handler(func, types, (x, 0, key), {})
    if (isinstance(key, torch.Tensor) and key.dim() > 1 and not key.is_floating_point() and key.dtype != torch.bool
            and not (is_replicated(x) and not isinstance(key, ShardTensor))):
        return _take_rows(func, x, key)
    items = _expand_key(key, x.dim())
    if not shard_dims_of(x.placements):
        return wrap(func, x.to_local()[key], x)
    if items is None:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a tensor, list or bool index (advanced "
                                  "indexing) on a sharded tensor; use index_select / gather with global "
                                  f"indices, or {WAY_OUT}")
    return _index_sharded(func, x, items)


def _take_rows(func, x, key):
    """``x[key]`` with an integer key of two or more dims (kNN ids ``[N, k]``): rows of ``x`` by
    global index, shaped ``key.shape + x.shape[1:]``. A sharded key ShardTensor (sharded along its
    dim 0, on ``x``'s sharding mesh dim) gives a result laid out like it; a plain key, the
    ``torch.chunk`` layout of its dim 0. ``x`` sharded along dim 0 by one mesh dim (rows fetched from
    their owners) or replicated (each rank picks its key rows)."""
    mesh = x.device_mesh
    sd = shard_dim_of(x.placements)
    if isinstance(key, ShardTensor):
        ksd = shard_dim_of(key.placements)
        if key.device_mesh != mesh or (ksd is not None and (ksd[1] != 0 or (sd is not None and ksd[0] != sd[0]))) \
                or any(isinstance(p, Partial) for p in key.placements):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a key on another mesh or sharded along "
                                      f"another dim ({key.placements}); {WAY_OUT}")
        if ksd is None:
            key = key.to_local()
    key_sharded = isinstance(key, ShardTensor)
    if sd is None:  # a replicated x and a sharded key: each rank picks the rows of its key rows
        local = _partial_local(x, key)[key.to_local()]
        placements = tuple(Shard(0) if isinstance(p, Shard) else Replicate() for p in key.placements)
        return _FromLocal.apply(local, mesh, placements, tuple(key._shard_sizes))
    if len(shard_dims_of(x.placements)) > 1 or sd[1] != 0:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a {key.dim()}-d key on a tensor sharded along "
                                  f"{[d for _, d in shard_dims_of(x.placements)]} ({x.placements}): supported for "
                                  f"a tensor sharded along dim 0 by one mesh dim; {WAY_OUT}")
    m = sd[0]
    group, world, coord = mesh.get_group(m), mesh.size(m), mesh.get_local_rank(m)
    tail = tuple(x.shape[1:])
    if key_sharded:
        idx = key.to_local().to(device=x._local_tensor.device, dtype=torch.int64)
        sizes = list(key._shard_sizes)
        _check_range(func, idx, x.shape[0], group, world)
        got = fetch_rows(func, x, idx.reshape(-1))
        local_shape = tuple(idx.shape)
    else:
        idx = key.to(device=x._local_tensor.device, dtype=torch.int64)
        sizes = chunk_sizes(idx.shape[0], world)
        _check_range(func, idx, x.shape[0])
        parts = torch.split(idx, sizes)
        got = fetch_rows(func, x, [part.reshape(-1) for part in parts])
        local_shape = tuple(parts[coord].shape)
    placements = tuple(Shard(0) if isinstance(p, Shard) else p for p in x.placements)
    return _FromLocal.apply(got.reshape(local_shape + tail), mesh, placements, tuple(sizes))


def select_handler(func, types, args, kwargs):
    """``select(dim, index)``: ``x[..., index]`` at ``dim`` (an index on the sharded dim returns
    the replicated row)."""
    x = args[0] if args else kwargs["input"]
    dim = args[1] if len(args) > 1 else kwargs["dim"]
    index = args[2] if len(args) > 2 else kwargs["index"]
    dim = dim % max(x.dim(), 1)
    return getitem_handler(func, types, (x, (slice(None),) * dim + (index,)), {})


def narrow_handler(func, types, args, kwargs):
    """``narrow(dim, start, length)``: the slice ``[start, start + length)`` of ``dim``."""
    x = args[0] if args else kwargs["input"]
    dim, start, length = [args[i] if len(args) > i else kwargs[n] for i, n in ((1, "dim"), (2, "start"), (3, "length"))]
    dim = dim % max(x.dim(), 1)
    start = int(start)
    if start < 0:
        start += x.shape[dim]
    if not 0 <= start <= x.shape[dim] or length < 0 or start + length > x.shape[dim]:
        raise IndexError(f"{op_name(func)}: start ({start}) + length ({length}) exceeds dimension size "
                         f"({x.shape[dim]})")
    return getitem_handler(func, types, (x, (slice(None),) * dim + (slice(start, start + length),)), {})


def split_handler(func, types, args, kwargs):
    """``split`` / ``chunk``: along an unsharded dim local; along the sharded dim a tuple of
    slices (each re-sharded without communication)."""
    x = args[0] if args else kwargs["input" if "input" in kwargs else "tensor"]
    reference(func, [x])
    is_chunk = func in (torch.chunk, torch.Tensor.chunk)
    what = args[1] if len(args) > 1 else kwargs["chunks" if is_chunk else "split_size_or_sections"
                                                if "split_size_or_sections" in kwargs else "split_size"]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    dim = dim % max(x.dim(), 1)
    if dim not in [d for _, d in shard_dims_of(x.placements)]:
        return wrap(func, func(x.to_local(), what, dim), x)
    n = x.shape[dim]
    if is_chunk:
        step = -(-n // what) if n else 1
        pieces = [min(step, n - a) for a in range(0, n, step)] or [0]
    elif isinstance(what, int):
        pieces = [min(what, n - a) for a in range(0, n, what)] or [0]
    else:
        pieces = list(what)
        if sum(pieces) != n:
            raise RuntimeError(f"{op_name(func)} expects split_size_or_sections to sum exactly to {n} (input tensor's "
                               f"size at dimension {dim}), but got split_sizes={pieces}")
    starts = _offsets(pieces)
    return tuple(getitem_handler(func, types, (x, (slice(None),) * dim + (slice(a, a + p),)), {})
                 for a, p in zip(starts, pieces))


def unbind_handler(func, types, args, kwargs):
    """``unbind`` along an unsharded dim (local; the Shard dim moves down when ``dim`` is before it)."""
    x = args[0] if args else kwargs["input"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    dim = dim % max(x.dim(), 1)
    reference(func, [x])
    if dim in [d for _, d in shard_dims_of(x.placements)]:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} along the sharded dim {dim} would broadcast every "
                                  f"row; use x.full_tensor().unbind({dim}), index the rows you need, or {WAY_OUT}")
    placements = tuple(Shard(p.dim - 1) if isinstance(p, Shard) and p.dim > dim else p for p in x.placements)
    return wrap(func, func(x.to_local(), dim), x, placements=placements)


def _route(sizes, want, flat):
    """``(owner rank, local row or element)`` of every requested global row (or flat pair)."""
    if flat:
        return want[:, 0], want[:, 1]
    ends = torch.tensor(_offsets(sizes) + [sum(sizes)], dtype=torch.int64, device=want.device)
    owner = torch.searchsorted(ends[1:], want, right=True)
    return owner, want - ends[owner]


def fetch_rows(func, x, want, flat: bool = False):
    """Rows of a sharded ``x`` at global positions ``want``, fetched from their owners.

    Args:
        func: the op, for messages.
        x: ShardTensor sharded along dim ``d``.
        want: ``[k]`` int64 global indices along ``d`` in ``[0, N)`` this rank asks for (any order,
            repeats allowed, a different ``k`` per rank); with ``flat``, ``[k, 2]`` pairs of
            (owner rank, element index into the owner's flattened local tensor). A list of every
            rank's ``want`` (a replicated index) skips the exchange of request counts and indices.
        flat: fetch single elements instead of rows.

    Returns:
        The requested rows in ``want``'s order, ``[..., k, ...]`` (``k`` along dim ``d``), or ``[k]``
        elements with ``flat``. Differentiable (repeated picks sum their gradients).
    """
    m, d = shard_dim_of(x.placements)
    mesh, sizes = x.device_mesh, list(x._shard_sizes)
    group, world, coord = mesh.get_group(m), mesh.size(m), mesh.get_local_rank(m)
    source, dim = (x.to_local().reshape(-1), 0) if flat else (x.to_local(), d)
    if isinstance(want, (list, tuple)):
        routes = [_route(sizes, w, flat) for w in want]
        owner = routes[coord][0]
        table = [torch.bincount(o, minlength=world).tolist() for o, _ in routes]
        per_rank = [local[o == coord] for o, local in routes]  # stable: in each requester's order
    else:
        owner, local = _route(sizes, want, flat)
        counts = torch.bincount(owner, minlength=world).tolist()
        table = all_gather_sizes(counts, group).tolist() if world > 1 else [counts]
        order = torch.argsort(owner, stable=True)
        requests = all_to_all_v(local[order], table, 0, group)  # what others want from me, by rank
        per_rank = list(torch.split(requests, [table[j][coord] for j in range(world)]))
    order = torch.argsort(owner, stable=True)
    send_sizes = [[table[j][i] for j in range(world)] for i in range(world)]
    got = indexed_all_to_all_v(source, per_rank, send_sizes, dim=dim, group=group)
    return got.index_select(dim, torch.argsort(order))


def _partial_local(x, index):
    """Local copy of a replicated ``x`` feeding the rows of a sharded ``index``: each rank's
    gradient is a partial sum, so backward sums it over the index's sharding mesh dim."""
    return x.to_local(grad_placements=tuple(Partial() if isinstance(p, Shard) else Replicate()
                                            for p in index.placements))


def _check_range(func, idx, n, group=None, world=1):
    """Raise IndexError on every rank when any rank's ``idx`` leaves ``[0, n)``."""
    bad = int(idx.numel() > 0 and (int(idx.min()) < 0 or int(idx.max()) >= n))
    if world > 1:
        bad_anywhere = all_gather_sizes([bad], group).reshape(-1).tolist()
    else:
        bad_anywhere = [bad]
    if any(bad_anywhere):
        raise IndexError(f"ShardTensor: {op_name(func)}: index out of range for a dim of size {n} on rank(s) "
                         f"{[r for r, b in enumerate(bad_anywhere) if b]}")


def _index_layout(func, x, index):
    """``(local index, its sharded dim, shard sizes, this rank's offset)`` of a sharded index
    ShardTensor on ``x``'s sharding mesh dim, or ``(plain index, None, None, None)`` for a plain or
    replicated one."""
    m, _ = shard_dim_of(x.placements)
    if isinstance(index, ShardTensor):
        isd = shard_dim_of(index.placements)
        if index.device_mesh != x.device_mesh or (isd is not None and isd[0] != m) or any(
                isinstance(p, Partial) for p in index.placements):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with an index on another mesh or mesh dim "
                                      f"({index.placements}); {WAY_OUT}")
        if isd is not None:
            return index.to_local(), isd[1], list(index._shard_sizes), index.offsets()
        index = index.to_local()
    return index, None, None, None


def _source_dim_index(func, args, kwargs):
    """``(input, dim, index)`` of ``index_select`` / ``gather``, ``dim`` made non-negative; the
    input must be a ShardTensor (a plain one with a ShardTensor index is refused)."""
    x = args[0] if args else kwargs["input"]
    dim = args[1] if len(args) > 1 else kwargs["dim"]
    index = args[2] if len(args) > 2 else kwargs["index"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} of a plain tensor with a ShardTensor index; {WAY_OUT}")
    reference(func, [x])
    return x, dim % max(x.dim(), 1), index


def _several_sharded_dims(func, x, dim, index):
    """Whether ``index_select`` / ``gather`` of ``x`` meets several sharded dims (several mesh dims).

    Returns:
        False when at most one dim is sharded; True when several are, with a plain (or
        replicated) index: along an unsharded ``dim`` the caller runs locally, along a sharded one
        through :func:`_along_one_of_several`. A sharded index raises NotImplementedError naming
        the op.
    """
    sharded = [d for _, d in shard_dims_of(x.placements)]
    if len(sharded) < 2:
        return False
    if isinstance(index, ShardTensor) and not is_replicated(index):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} of a tensor sharded along several dims {sharded} "
                                  f"({x.placements}) with a sharded index is not supported; redistribute so that "
                                  f"one mesh dim shards it, or {WAY_OUT}")
    return True


def _along_one_of_several(func, x, dim, index):
    """``func(x, dim, index)`` along ``dim`` sharded by one of several mesh dims, with a plain (or
    replicated) index: that mesh dim gathers ``dim`` (all-gather-v inside its groups), the op runs
    as along an unsharded dim, and the result is sharded along ``dim`` again by that mesh dim (the
    ``torch.chunk`` layout, as for one mesh dim). Differentiable through both redistributions."""
    m = next(m for m, d in shard_dims_of(x.placements) if d == dim)
    gathered = x.redistribute(placements=tuple(Replicate() if i == m else p for i, p in enumerate(x.placements)))
    out = func(gathered, dim, index)
    return out.redistribute(placements=tuple(Shard(dim) if i == m else p for i, p in enumerate(out.placements)))


def index_select_handler(func, types, args, kwargs):
    """``index_select(x, dim, index)`` with global indices.

    Along an unsharded dim with a plain / replicated index: local, layout kept. Along the
    sharded dim: rows fetched from their owners (``indexed_all_to_all_v``). With an index
    ShardTensor (1-d, sharded) the result is sharded along ``dim`` like the index; with a plain
    index it is sharded along ``dim`` in the ``torch.chunk`` layout of the index."""
    x, dim, index = _source_dim_index(func, args, kwargs)
    if _several_sharded_dims(func, x, dim, index):
        if dim in [d for _, d in shard_dims_of(x.placements)]:
            return _along_one_of_several(torch.index_select, x, dim, index)
        local_idx = index.to_local() if isinstance(index, ShardTensor) else index
        return wrap(func, x.to_local().index_select(dim, local_idx), x)
    sd = shard_dim_of(x.placements)
    if sd is None:
        if isinstance(index, ShardTensor) and not is_replicated(index):
            # replicated source, sharded index: each rank picks its own index rows
            isz = list(index._shard_sizes)
            out = _partial_local(x, index).index_select(dim, index.to_local())
            placements = tuple(Shard(dim) if isinstance(p, Shard) else Replicate() for p in index.placements)
            return _FromLocal.apply(out, x.device_mesh, placements, tuple(isz))
        local_idx = index.to_local() if isinstance(index, ShardTensor) else index
        return wrap(func, x.to_local().index_select(dim, local_idx), x)
    m, d = sd
    mesh = x.device_mesh
    local_idx, idx_dim, idx_sizes, idx_off = _index_layout(func, x, index)
    if local_idx.dim() > 1:
        raise IndexError(f"{op_name(func)}(): Index is supposed to be a vector")
    if idx_sizes is None:
        if dim != d:
            return wrap(func, x.to_local().index_select(dim, local_idx), x)
        # A plain index is the same on every rank: each takes its torch.chunk part, and every
        # rank's requests are known without communication.
        idx_sizes = chunk_sizes(local_idx.numel(), mesh.size(m))
        local_idx = local_idx.to(device=x._local_tensor.device, dtype=torch.int64)
        _check_range(func, local_idx, x.shape[d])
        got = fetch_rows(func, x, list(torch.split(local_idx, idx_sizes)))
        placements = tuple(Shard(dim) if isinstance(p, Shard) else p for p in x.placements)
        return _FromLocal.apply(got, mesh, placements, tuple(idx_sizes))
    local_idx = local_idx.to(device=x._local_tensor.device, dtype=torch.int64)
    placements = tuple(Shard(dim) if isinstance(p, Shard) else p for p in x.placements)
    if dim != d:
        # Index rows spread over ranks, source rows sharded along another dim: every rank needs
        # the whole source; its gradient is a per-rank partial sum.
        full = x.full_tensor(grad_placements=tuple(Partial() if isinstance(p, Shard) else Replicate()
                                                   for p in x.placements))
        return _FromLocal.apply(full.index_select(dim, local_idx), mesh, placements, tuple(idx_sizes))
    _check_range(func, local_idx, x.shape[d], mesh.get_group(m), mesh.size(m))
    return _FromLocal.apply(fetch_rows(func, x, local_idx), mesh, placements, tuple(idx_sizes))


def gather_handler(func, types, args, kwargs):
    """``gather(x, dim, index)`` with global indices along ``dim``.

    Along an unsharded dim: local; the index must be laid out like ``x`` (same Shard dim and
    sizes, or a plain tensor spanning the sharded dim, of which each rank uses its rows). Along
    the sharded dim: each element is fetched from its owner (``indexed_all_to_all_v``); the
    result is laid out like the index (a plain index: sharded along ``dim`` in the ``torch.chunk``
    layout)."""
    if kwargs.get("sparse_grad") or len(args) > 3 and args[3]:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with sparse_grad=True; {WAY_OUT}")
    x, dim, index = _source_dim_index(func, args, kwargs)
    if _several_sharded_dims(func, x, dim, index):
        if dim in [d for _, d in shard_dims_of(x.placements)]:
            return _along_one_of_several(torch.gather, x, dim, index)
        local_idx = index.to_local() if isinstance(index, ShardTensor) else align_plain(func, index, x)
        return wrap(func, torch.gather(x.to_local(), dim, local_idx), x)
    sd = shard_dim_of(x.placements)
    if sd is None or sd[1] != dim:
        if isinstance(index, ShardTensor):
            isd = shard_dim_of(index.placements)
            if sd is None and isd is not None:
                # replicated source: the index's rows sit at its offset along its sharded dim
                local = _partial_local(x, index)
                if isd[1] != dim:
                    local = local.narrow(isd[1], index.offsets(), index._local_tensor.shape[isd[1]])
                return wrap(func, torch.gather(local, dim, index.to_local()), index)
            if isd != sd or index._shard_sizes != x._shard_sizes:
                raise ValueError(f"ShardTensor: {op_name(func)}: the index ({index.placements}, sizes "
                                 f"{index._shard_sizes}) must be laid out like the input ({x.placements}, sizes "
                                 f"{x._shard_sizes}) along an unsharded gather dim")
            local_idx = index.to_local()
        else:
            local_idx = align_plain(func, index, x)
        return wrap(func, torch.gather(x.to_local(), dim, local_idx), x)
    m, d = sd
    mesh = x.device_mesh
    local_idx, idx_dim, idx_sizes, idx_off = _index_layout(func, x, index)
    if local_idx.dim() != x.dim():
        raise RuntimeError(f"{op_name(func)}: Index tensor must have the same number of dimensions as input tensor")
    for k in range(x.dim()):
        if k != dim and index.shape[k] > x.shape[k]:
            raise RuntimeError(f"{op_name(func)}: Size does not match at dimension {k}: index {tuple(index.shape)} "
                               f"vs input {tuple(x.shape)} (index.size(k) <= input.size(k) for k != dim)")
    local_idx = local_idx.to(device=x._local_tensor.device, dtype=torch.int64)
    placements = tuple(Shard(idx_dim if idx_sizes is not None else dim) if isinstance(p, Shard) else p
                       for p in x.placements)
    if idx_sizes is None:
        # A plain index is the same on every rank: each takes its torch.chunk part along dim,
        # and every rank's requests are known without communication.
        idx_sizes = chunk_sizes(local_idx.shape[dim], mesh.size(m))
        _check_range(func, local_idx, x.shape[d])
        parts = torch.split(local_idx, idx_sizes, dim)
        want = [_element_sources(x, dim, part, dim, off) for part, off in zip(parts, _offsets(idx_sizes))]
        got = fetch_rows(func, x, want, flat=True).reshape(parts[mesh.get_local_rank(m)].shape)
        return _FromLocal.apply(got, mesh, placements, tuple(idx_sizes))
    _check_range(func, local_idx, x.shape[d], mesh.get_group(m), mesh.size(m))
    got = fetch_rows(func, x, _element_sources(x, dim, local_idx, idx_dim, idx_off), flat=True)
    return _FromLocal.apply(got.reshape(local_idx.shape), mesh, placements, tuple(idx_sizes))


def _element_sources(x, dim, idx, idx_dim, idx_off):
    """``[k, 2]`` (owner rank, position in the owner's flattened local tensor) of the element each
    entry of ``idx`` (a block of a gather index, starting at ``idx_off`` along ``idx_dim``) picks:
    its row is the entry, its other coordinates are the entry's global ones."""
    sizes = list(x._shard_sizes)
    dev = idx.device
    ends = torch.tensor(_offsets(sizes) + [sum(sizes)], dtype=torch.int64, device=dev)
    rows = idx.reshape(-1)
    owner = torch.searchsorted(ends[1:], rows, right=True)
    coords = torch.stack(torch.meshgrid(*[torch.arange(n, device=dev) for n in idx.shape], indexing="ij"), -1)
    coords = coords.reshape(-1, x.dim())
    coords[:, idx_dim] += idx_off
    coords[:, dim] = rows - ends[owner]
    d = shard_dim_of(x.placements)[1]
    shapes = torch.tensor([[n if k == d else x.shape[k] for k in range(x.dim())] for n in sizes], dtype=torch.int64,
                          device=dev)
    strides = torch.flip(torch.cumprod(torch.flip(shapes, [1]), 1), [1]).roll(-1, 1)  # row-major
    strides[:, -1] = 1
    return torch.stack([owner, (coords * strides[owner]).sum(1)], 1)


register(getitem_handler, (torch.Tensor.__getitem__,))
register(select_handler, (torch.select, torch.Tensor.select))
register(narrow_handler, (torch.narrow, torch.Tensor.narrow))
register(split_handler, (torch.split, torch.Tensor.split, torch.chunk, torch.Tensor.chunk))
register(unbind_handler, (torch.unbind, torch.Tensor.unbind))
register(index_select_handler, (torch.index_select, torch.Tensor.index_select))
register(gather_handler, (torch.gather, torch.Tensor.gather))
