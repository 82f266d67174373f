"""``sum`` / ``mean`` reductions, and ``item()`` / ``tolist()`` of replicated values."""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate, Shard
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import pack_sizes, sizes_by_mesh_dim
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, norm_dims, op_name, register

__all__ = ["reduction_handler", "scalar_handler"]


_MEAN = {torch.mean, torch.Tensor.mean}


def reduction_handler(func, types, args, kwargs):
    """``sum`` / ``mean`` over all dims or any dims: local reduction, then an all-reduce over every
    mesh dim whose sharded tensor dim is reduced (that mesh dim becomes Replicate); mesh dims that
    shard a kept dim stay Shard (the dim renumbered), Partial mesh dims stay Partial (the
    reduction is linear). ``mean`` divides by the global element count."""
    x = args[0] if args else kwargs["input"]
    rest = list(args[1:])
    dim = rest[0] if rest else kwargs.get("dim")
    keepdim = bool(rest[1] if len(rest) > 1 else kwargs.get("keepdim", False))
    dtype = kwargs.get("dtype")
    if isinstance(dim, torch.dtype):  # torch.sum(x, torch.float64)
        dim, dtype = None, dim
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; {WAY_OUT}")
    dims = norm_dims(dim, x.dim()) if dim is not None and not (isinstance(dim, (list, tuple)) and len(dim) == 0) else None
    red = list(range(x.dim())) if dims is None else dims
    keep = keepdim and dims is not None
    local = x.to_local()
    total = torch.sum(local, dim=red, keepdim=keep, dtype=dtype) if red else local.clone()
    if func in _MEAN:
        count = 1
        for k in red:
            count *= x.shape[k]
        total = total / count
    mesh = x.device_mesh
    per_dim = sizes_by_mesh_dim(x.placements, x._shard_sizes)
    placements, sizes = [], [None] * mesh.ndim
    for m, p in enumerate(x.placements):
        if isinstance(p, Shard) and p.dim in red:
            total = all_reduce_sum(total, group=mesh.get_group(m))
            placements.append(Replicate())
        elif isinstance(p, Shard):
            placements.append(Shard(p.dim if keep else p.dim - sum(1 for k in red if k < p.dim)))
            sizes[m] = per_dim[m]
        else:
            placements.append(p)
    return _FromLocal.apply(total, mesh, tuple(placements), pack_sizes(placements, sizes))


def scalar_handler(func, types, args, kwargs):
    """``item()`` / ``tolist()`` of a replicated ShardTensor (e.g. a loss for logging): its local
    value is the whole value. A sharded or Partial tensor raises (call ``full_tensor()`` first)."""
    x = args[0]
    if not is_replicated(x):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} of a {x.placements} tensor would see only this "
                                  "rank's part; call .full_tensor() first")
    return func(x._local_tensor, *args[1:], **kwargs)



register(reduction_handler, (torch.sum, torch.Tensor.sum, torch.mean, torch.Tensor.mean))
register(scalar_handler, (torch.Tensor.item, torch.Tensor.tolist))
