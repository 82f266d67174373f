"""``sum`` / ``mean`` reductions, and ``item()`` / ``tolist()`` of replicated values."""
from __future__ import annotations

import torch

from meshshard.distributed import Partial, Replicate
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor.shard_tensor import _FromLocal
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import is_replicated, norm_dims, op_name, reference, register, wrap

__all__ = ["reduction_handler", "scalar_handler"]


_MEAN = {torch.mean, torch.Tensor.mean}


def reduction_handler(func, types, args, kwargs):
    """``sum`` / ``mean`` over all dims or any dims including the sharded one: local partial sum, then
    an all-reduce over the sharding mesh dim; the result is replicated. ``mean`` divides by the
    global element count. Over feature dims only: local, layout kept. A Partial (unsharded) input
    is reduced locally and stays Partial (the reduction is linear)."""
    x = args[0] if args else kwargs["input"]
    rest = list(args[1:])
    dim = rest[0] if rest else kwargs.get("dim")
    keepdim = rest[1] if len(rest) > 1 else kwargs.get("keepdim", False)
    dtype = kwargs.get("dtype")
    if isinstance(dim, torch.dtype):  # torch.sum(x, torch.float64)
        dim, dtype = None, dim
    dims = norm_dims(dim, x.dim()) if dim is not None and not (isinstance(dim, (list, tuple)) and len(dim) == 0) else None
    if any(isinstance(p, Partial) for p in x.placements) and shard_dim_of(x.placements) is None:
        # sum and mean are linear: reducing every rank's addend reduces the sum; it stays Partial.
        out = func(x.to_local(), *args[1:], **kwargs)
        return _FromLocal.apply(out, x.device_mesh, tuple(x.placements), None)
    ref = reference(func, [x])
    sd = shard_dim_of(ref.placements)
    local = x.to_local()
    if sd is None or (dims is not None and sd[1] not in dims):
        out = func(local, *args[1:], **kwargs)
        shift = 0 if keepdim or dims is None or sd is None else -sum(1 for k in dims if k < sd[1])
        return wrap(func, out, ref, shift)
    m, _ = sd
    red = list(range(x.dim())) if dims is None else dims
    total = torch.sum(local, dim=red, keepdim=bool(keepdim) and dims is not None, dtype=dtype)
    if func in _MEAN:
        count = 1
        for k in red:
            count *= x.shape[k]
        total = total / count
    total = all_reduce_sum(total, group=x.device_mesh.get_group(m))
    rep = tuple(Replicate() for _ in x.placements)
    return _FromLocal.apply(total, x.device_mesh, rep, None)


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
