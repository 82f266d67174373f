"""``F.conv1d/2d/3d`` and ``F.conv_transpose1d/2d/3d`` on a ShardTensor sharded along a spatial
dim (so ``nn.Conv2d`` etc. work unmodified), any kernel, stride, padding and dilation, uneven and
empty shards. A rank owns the output rows whose window starts in its rows (conv) or whose source
row ``(o + padding) // stride`` is one of its rows (transposed conv); it fetches the input rows
those outputs read (halo) and runs the op locally, with the zero padding of the global edges
applied explicitly. Weights are plain (or replicated) tensors; their gradients are per-rank
partial sums, as for ``nn.Linear``. A sharded batch dim runs locally.

``F.conv{1,2,3}d`` also runs on a tensor whose spatial dims are sharded by several mesh dims (an
image split in height and width on a 2-D mesh, ``(Shard(2), Shard(3))``): the halo is fetched one
sharded dim at a time inside that mesh dim's group, the second fetch on the rows the first one
brought, so the corner blocks come along."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.distributed.neighbors import fetch_ranges
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import pack_sizes, shard_dims_of, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, local_of, op_name, reference, register
from meshshard.tensor._ops._grid import (bind, empty_output, fetch, grid_input, keep_connected, owned_outputs,
                                         param_local, tuple_of, wrap_grid)

__all__ = ["conv_handler", "conv_transpose_handler"]

_CONV = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}
_CONV_T = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}


def _pads(padding, k, dil, nd):
    """(left, right) zero padding of every spatial dim, ``'same'`` / ``'valid'`` resolved as torch does."""
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "same":
        return [(dil[i] * (k[i] - 1) // 2, dil[i] * (k[i] - 1) - dil[i] * (k[i] - 1) // 2) for i in range(nd)]
    return [(p, p) for p in tuple_of(padding, nd, "padding")]


def _flat_pad(pads):
    """``F.pad``'s argument (last dim first) from per-dim (left, right)."""
    return [v for lr in reversed(pads) for v in lr]


def _conv_windows(n, sizes, ext, stride, pad_left, pad_right, func, dim):
    """Output rows per rank along one sharded dim and the global input window each rank reads.

    A rank owns the outputs whose window starts (in padded coordinates) in its rows.

    Returns:
        ``(counts, windows)``: ``W`` output counts and ``W`` ``(start, stop)`` input ranges (start
        may be negative and stop beyond ``n``: the zero padding of the global edges).
    """
    n_out = (n + pad_left + pad_right - ext - 1) // stride + 1
    if n_out < 1:
        raise ValueError(f"{op_name(func)}: the sharded dim {dim} has {n} rows, fewer than the kernel's "
                         f"extent {ext + 1} after padding {(pad_left, pad_right)}")
    if n == 0:
        raise ValueError(f"ShardTensor: {op_name(func)} of a tensor with 0 rows along the sharded dim {dim}")
    ends = torch.tensor(list(sizes), dtype=torch.long).cumsum(0)
    owner = torch.searchsorted(ends, (torch.arange(n_out) * stride).clamp(0, n - 1), right=True)
    counts = torch.bincount(owner, minlength=len(sizes)).tolist()
    starts = [sum(counts[:r]) for r in range(len(counts))]
    windows = [(lo * stride - pad_left, (lo + c - 1) * stride - pad_left + ext + 1) if c else (0, 0)
               for lo, c in zip(starts, counts)]
    return counts, windows


def _weight_local(func, p, x):
    """A weight / bias as a plain local tensor; a replicated ShardTensor weight gets its gradient
    summed over the ranks (``local_of`` declares it Partial on every sharding mesh dim)."""
    if isinstance(p, ShardTensor):
        if not is_replicated(p):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a sharded weight; weights must be "
                                      "plain or replicated tensors")
        return local_of(func, p, x)
    return p


def _conv_several_dims(func, a, x, nd):
    """``F.conv{1,2,3}d`` of ``x`` whose spatial dims are sharded by several mesh dims."""
    reference(func, [x])  # refuses Partial
    mesh, placements = x.device_mesh, tuple(x.placements)
    first_spatial = x.dim() - nd
    sds = shard_dims_of(placements)
    if x.dim() != nd + 2 or any(d == 1 or d < first_spatial and d != 0 for _, d in sds):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} of a {x.dim()}-d tensor sharded {placements}: "
                                  f"several sharded dims are supported for [N, C, *spatial] inputs sharded along "
                                  f"spatial dims (and the batch dim); {WAY_OUT}")
    w, b = (_weight_local(func, a[name], x) for name in ("weight", "bias"))
    k = tuple(w.shape[2:])
    s, dil = tuple_of(a["stride"], nd, "stride"), tuple_of(a["dilation"], nd, "dilation")
    if isinstance(a["padding"], str) and a["padding"] == "same" and any(v != 1 for v in s):
        raise ValueError(f"{op_name(func)}: padding='same' is not supported for strided convolutions")
    pads = _pads(a["padding"], k, dil, nd)
    local = x.to_local()
    per_dim = sizes_by_mesh_dim(placements, x._shard_sizes)
    out_sizes = list(per_dim)
    local_pads = list(pads)
    empty = []  # spatial dims where this rank owns no output
    for m, d in sds:  # mesh-dim order on every rank, so each group's fetch pairs up
        if d < first_spatial:  # the batch dim: outputs follow their inputs
            continue
        j = d - first_spatial
        sizes = per_dim[m]
        n = sum(sizes)
        coord = mesh.get_local_rank(m)
        counts, windows = _conv_windows(n, sizes, dil[j] * (k[j] - 1), s[j], pads[j][0], pads[j][1], func, d)
        clipped = [[(min(max(lo, 0), n), max(min(max(lo, 0), n), min(hi, n)))] for lo, hi in windows]
        local = fetch_ranges(local, sizes, clipped, dim=d, group=mesh.get_group(m))
        lo, hi = windows[coord]
        local_pads[j] = (max(0, -lo), max(0, hi - n)) if counts[coord] else (0, 0)
        out_sizes[m] = counts
        if not counts[coord]:
            empty.append(j)

    def call(t):
        return func(F.pad(t, _flat_pad(local_pads)), w, b, s, 0, dil, a["groups"])

    if empty:  # probe the other dims' sizes on zero rows, then cut the empty dims to 0
        shape = list(local.shape)
        for j in empty:
            shape[first_spatial + j] = dil[j] * (k[j] - 1) + 1
        with torch.no_grad():
            out = call(local.new_zeros(shape))
        for j in empty:
            out = out.narrow(first_spatial + j, 0, 0)
        out = keep_connected(out, local, w, b)
    else:
        out = call(local)
    return _FromLocal.apply(out, mesh, placements, pack_sizes(placements, out_sizes))


def conv_handler(func, types, args, kwargs):
    """``F.conv{1,2,3}d`` with the input sharded along a spatial (or the batch) dim, or along
    several spatial dims by several mesh dims."""
    nd = _CONV[func]
    a = bind(("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
             dict(bias=None, stride=1, padding=0, dilation=1, groups=1), args, kwargs)
    if hasattr(a["input"], "placements") and len(shard_dims_of(a["input"].placements)) > 1:
        return _conv_several_dims(func, a, a["input"], nd)
    g = grid_input(func, a["input"], nd)
    w, b = param_local(func, a["weight"], g), param_local(func, a["bias"], g)
    k = tuple(w.shape[2:])
    s, dil = tuple_of(a["stride"], nd, "stride"), tuple_of(a["dilation"], nd, "dilation")
    if isinstance(a["padding"], str) and a["padding"] == "same" and any(v != 1 for v in s):
        raise ValueError(f"{op_name(func)}: padding='same' is not supported for strided convolutions")
    pads = _pads(a["padding"], k, dil, nd)
    if g.j is None:  # replicated or batch-sharded: every output row depends on local rows only
        return wrap_grid(g, func(g.local, w, b, s, a["padding"], dil, a["groups"]), None)
    j = g.j
    ext = dil[j] * (k[j] - 1)
    n_out = (g.n + pads[j][0] + pads[j][1] - ext - 1) // s[j] + 1
    if n_out < 1:
        raise ValueError(f"{op_name(func)}: the sharded dim {g.dim} has {g.n} rows, fewer than the kernel's "
                         f"extent {ext + 1} after padding {pads[j]}")
    counts = owned_outputs(g, torch.arange(n_out) * s[j])  # window start in padded coordinates
    starts = [sum(counts[:r]) for r in range(len(counts))]
    windows = [[(lo * s[j] - pads[j][0], (lo + c - 1) * s[j] - pads[j][0] + ext + 1) if c else (0, 0)]
               for lo, c in zip(starts, counts)]
    win = fetch(g, windows)
    (a0, b0), = windows[g.coord]
    c = counts[g.coord]
    local_pads = list(pads)
    local_pads[j] = (max(0, -a0), max(0, b0 - g.n)) if c else (0, 0)  # zeros beyond the global edges

    def call(t):
        return func(F.pad(t, _flat_pad(local_pads)), w, b, s, 0, dil, a["groups"])

    out = call(win) if c else empty_output(g, call, win, ext + 1, w, b)
    return wrap_grid(g, out, counts)


def conv_transpose_handler(func, types, args, kwargs):
    """``F.conv_transpose{1,2,3}d`` with the input sharded along a spatial (or the batch) dim."""
    nd = _CONV_T[func]
    a = bind(("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
             dict(bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1), args, kwargs)
    g = grid_input(func, a["input"], nd)
    w, b = param_local(func, a["weight"], g), param_local(func, a["bias"], g)
    k = tuple(w.shape[2:])
    s, dil = tuple_of(a["stride"], nd, "stride"), tuple_of(a["dilation"], nd, "dilation")
    p, op = tuple_of(a["padding"], nd, "padding"), tuple_of(a["output_padding"], nd, "output_padding")
    if g.j is None:
        return wrap_grid(g, func(g.local, w, b, s, p, op, a["groups"], dil), None)
    j = g.j
    ext = dil[j] * (k[j] - 1)
    n_out = (g.n - 1) * s[j] - 2 * p[j] + ext + op[j] + 1
    if n_out < 1:
        raise ValueError(f"{op_name(func)}: empty output along the sharded dim {g.dim}")
    # output o receives input rows i with i*s - p <= o <= i*s - p + ext; its anchor is (o + p) // s
    counts = owned_outputs(g, (torch.arange(n_out) + p[j]) // s[j])
    starts = [sum(counts[:r]) for r in range(len(counts))]

    def window(lo, c):
        if not c:
            return (0, 0)
        i0 = max(0, -((ext - lo - p[j]) // s[j]))  # ceil((lo + p - ext) / s)
        i1 = min(g.n - 1, (lo + c - 1 + p[j]) // s[j])
        return (i0, max(i0, i1 + 1))

    windows = [[window(lo, c)] for lo, c in zip(starts, counts)]
    win = fetch(g, windows)
    lo, c = starts[g.coord], counts[g.coord]
    (i0, i1), = windows[g.coord]
    pj = list(p)
    pj[j] = 0
    opj = list(op)
    opj[j] = 0
    if i1 > i0:
        full = func(win, w, None, s, pj, opj, a["groups"], dil)
        first = lo + p[j] - i0 * s[j]  # local row of global output lo
        length = full.shape[g.dim]
        full = F.pad(full, [0, 0] * (nd - 1 - j) + [max(0, -first), max(0, first + c - length)])
        out = full.narrow(g.dim, max(0, first), c)
    else:  # outputs no input row reaches (stride > kernel extent), or none at all
        out = empty_output(g, lambda t: func(t, w, None, s, pj, opj, a["groups"], dil), win, 1, w)
        if c:
            shape = list(out.shape)
            shape[g.dim] = c
            out = out.new_zeros(shape) + out.sum()  # out is empty: adds 0, keeps the link to win and w
    if b is not None:
        out = out + b.reshape([-1] + [1] * nd)
    return wrap_grid(g, out, counts)


register(conv_handler, tuple(_CONV))
register(conv_transpose_handler, tuple(_CONV_T))
