"""``max`` / ``min`` / ``amax`` / ``amin`` / ``argmax`` / ``argmin`` over any dims, including the
sharded one: values and GLOBAL indices, ties resolved like torch (the first occurrence).

Over the sharded dim each rank reduces its own rows, the W candidates (value and global index)
are gathered along that dim (differentiable: the gradient reaches only the winning rank's row),
and every rank picks the same winner: the best value, the smallest global index among equal
values (NaN wins, as in torch). The result is replicated. A rank with zero rows offers a
sentinel that loses every comparison. ``amax`` / ``amin`` spread the gradient evenly over ties
within a rank and over tied ranks, which differs from torch only when equal maxima sit on
several ranks. Over dims that are not sharded the op is local and the layout kept.

A tensor sharded along several dims by several mesh dims (an image split in height and width)
picks over one mesh dim after the other (the pick, best value then smallest global index, does not
depend on the grouping); the result is Replicate on the mesh dims whose dims were reduced and
keeps the other Shard placements.
"""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate, Shard
from meshshard.distributed.autograd import all_gather_v
from meshshard.tensor.redistribute import _GatherToReplicate
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import pack_sizes, shard_dims_of, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, norm_dims, op_name, reference, register, wrap
from meshshard.tensor._ops.pointwise import pointwise_handler

__all__ = ["extrema_handler"]

_MAX = {torch.max, torch.Tensor.max, torch.amax, torch.Tensor.amax, torch.argmax, torch.Tensor.argmax}
_VALUES = {torch.amax, torch.Tensor.amax, torch.amin, torch.Tensor.amin}
_INDICES = {torch.argmax, torch.Tensor.argmax, torch.argmin, torch.Tensor.argmin}


def _worst(dtype, is_max: bool):
    """A value every real value beats (ties with it are broken by index, which it always loses)."""
    if dtype.is_floating_point:
        return float("-inf") if is_max else float("inf")
    if dtype == torch.bool:
        return not is_max
    info = torch.iinfo(dtype)
    return info.min if is_max else info.max


def _sentinel(shape, local, is_max: bool):
    """The candidate of a rank with zero rows; tied to ``local`` by autograd (adding its empty sum,
    0) so that every rank's result requires grad alike and backward runs on every rank."""
    value = torch.full(shape, _worst(local.dtype, is_max), dtype=local.dtype, device=local.device)
    return value + local.sum() if local.requires_grad else value


def _pick(values, index, dim: int, is_max: bool):
    """Winner along ``dim`` of candidates ``values`` with global ``index``: best value, then the
    smallest index; NaN beats everything (torch's rule). Returns (values, indices), keepdim."""
    best = values.amax(dim, keepdim=True) if is_max else values.amin(dim, keepdim=True)
    if values.dtype.is_floating_point:
        nan = torch.isnan(values)
        any_nan = nan.any(dim, keepdim=True)
        hit = torch.where(any_nan, nan, values == best)
    else:
        hit = values == best
    big = torch.iinfo(torch.int64).max
    choice = torch.where(hit, index, torch.full_like(index, big)).argmin(dim, keepdim=True)
    return values.gather(dim, choice), index.gather(dim, choice)


def _parse(func, args, kwargs):
    x = args[0] if args else kwargs["input"]
    rest = list(args[1:])
    if func in _VALUES:
        dim = rest[0] if rest else kwargs.get("dim", ())
        keepdim = rest[1] if len(rest) > 1 else kwargs.get("keepdim", False)
    else:
        dim = rest[0] if rest else kwargs.get("dim")
        keepdim = rest[1] if len(rest) > 1 else kwargs.get("keepdim", False)
    if isinstance(dim, (list, tuple)) and len(dim) == 0:
        dim = None
    return x, dim, bool(keepdim)


def _kept_placements(placements, red, keepdim):
    """Placements of a result reduced over ``red``: Replicate on the mesh dims that shard a reduced
    dim, the other Shard dims moved down past the removed dims (kept with ``keepdim``)."""
    out = []
    for p in placements:
        if isinstance(p, Shard):
            if p.dim in red:
                p = Replicate()
            elif not keepdim:
                p = Shard(p.dim - sum(1 for k in red if k < p.dim))
        out.append(p)
    return tuple(out)


def extrema_handler(func, types, args, kwargs):
    """``max`` / ``min`` / ``amax`` / ``amin`` / ``argmax`` / ``argmin`` of a ShardTensor (sharded
    along one dim, or along several by several mesh dims)."""
    is_max = func in _MAX
    rest = list(args[1:])
    other = rest[0] if rest else kwargs.get("other")
    if isinstance(other, torch.Tensor):  # torch.max(a, b): element-wise maximum
        return pointwise_handler(torch.maximum if is_max else torch.minimum, types, (args[0], other), {})
    x, dim, keepdim = _parse(func, args, kwargs)
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; {WAY_OUT}")
    ref = reference(func, [x])
    sds = shard_dims_of(ref.placements)
    dims = norm_dims(dim, x.dim())
    hit = [(m, d) for m, d in sds if dims is None or d in dims]  # sharded dims the op reduces
    if not hit:
        out = func(x.to_local(), *args[1:], **kwargs)
        placements = _kept_placements(x.placements, dims or [], keepdim)
        return wrap(func, out, ref, placements=placements)
    for _, d in hit:
        if x.shape[d] == 0:
            raise IndexError(f"ShardTensor: {op_name(func)} over the sharded dim {d}, which is empty")
    if func not in _VALUES and dims is not None and len(dims) > 1:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} over several dims; {WAY_OUT}")
    mesh = x.device_mesh
    per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
    local = x.to_local()
    if dims is None:
        # Over all elements: candidates are this rank's best element and its global flat index.
        flat = local.reshape(-1)
        if flat.numel():
            k = int((flat.argmax() if is_max else flat.argmin()) if not flat.dtype.is_floating_point
                    or not torch.isnan(flat).any() else torch.isnan(flat).int().argmax())
            coords = list(torch.unravel_index(torch.tensor(k), local.shape))
            for m, d in sds:
                coords[d] = coords[d] + x.offsets(m)
            gidx = 0
            for c, n in zip(coords, x.shape):
                gidx = gidx * n + int(c)
            value, index = flat[k:k + 1], torch.tensor([gidx], device=local.device)
        else:
            value = _sentinel((1,), local, is_max)
            index = torch.tensor([x.numel()], device=local.device)
        red, axes = [], [(m, 0) for m, _ in sds]  # every mesh dim picks along the one candidate axis
    else:
        red = dims
        part = local
        others = [k for k in red if k not in [d for _, d in hit]]
        if others:  # reduce the unsharded dims first, keeping the sharded ones
            part = part.amax(others, keepdim=True) if is_max else part.amin(others, keepdim=True)
        if func in _VALUES:  # reduce every sharded dim of red here, then across its mesh dim below
            value = part
            for _, d in hit:
                if value.shape[d]:
                    value = value.amax(d, keepdim=True) if is_max else value.amin(d, keepdim=True)
                else:
                    shape = list(value.shape)
                    shape[d] = 1
                    value = _sentinel(shape, local, is_max)
            index = torch.zeros(value.shape, dtype=torch.int64, device=local.device)
        else:
            (m, d), = hit
            if local.shape[d]:
                value, index = (torch.max if is_max else torch.min)(part, d, keepdim=True)
                index = index + x.offsets(m)
            else:
                shape = list(part.shape)
                shape[d] = 1
                value = _sentinel(shape, local, is_max)
                index = torch.full(shape, x.shape[d], dtype=torch.int64, device=local.device)
        axes = hit
    for m, axis in axes:  # gather the candidates of each mesh dim and pick, one mesh dim after the other
        group, coord, world = mesh.get_group(m), mesh.get_local_rank(m), mesh.size(m)
        value = _GatherToReplicate.apply(value.contiguous(), [1] * world, axis, group, coord)
        with torch.no_grad():
            index = all_gather_v(index.contiguous(), [1] * world, dim=axis, group=group)
        if func in _VALUES:
            value = value.amax(axis, keepdim=True) if is_max else value.amin(axis, keepdim=True)
            index = index.narrow(axis, 0, 1)
        else:
            value, index = _pick(value, index, axis, is_max)
    best = value
    if dims is None:
        best, index = best.reshape(()), index.reshape(())
    elif not keepdim:
        best = best.reshape([n for k, n in enumerate(best.shape) if k not in red])
        index = index.reshape(best.shape)
    placements = _kept_placements(x.placements, [d for _, d in sds] if dims is None else red, keepdim)
    kept = [None if isinstance(p, Replicate) or per_dim[m] is None else per_dim[m] for m, p in enumerate(placements)]
    sizes = pack_sizes(placements, kept)
    wrap_out = lambda t: _FromLocal.apply(t, mesh, placements, sizes)  # noqa: E731
    if func in _INDICES:
        return wrap_out(index)
    if func in _VALUES or dims is None:
        return wrap_out(best)
    result_type = torch.return_types.max if is_max else torch.return_types.min
    return result_type((wrap_out(best), wrap_out(index)))


register(extrema_handler, (torch.max, torch.Tensor.max, torch.min, torch.Tensor.min, torch.amax, torch.Tensor.amax,
                           torch.amin, torch.Tensor.amin, torch.argmax, torch.Tensor.argmax, torch.argmin,
                           torch.Tensor.argmin))
