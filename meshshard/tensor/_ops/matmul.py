"""``matmul`` / ``mm`` / ``mv`` / ``@`` with sharded operands."""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import WAY_OUT, local_of, op_name, reference, register, wrap

__all__ = ["matmul_handler"]


def matmul_handler(func, types, args, kwargs):
    """``matmul`` / ``mm`` / ``mv`` / ``@`` with one sharded operand, when the sharded dim is not
    contracted (``X @ W`` with rows sharded, ``W @ X`` with columns sharded; the other operand is a
    plain / replicated value), or when both operands are sharded along the contracted dim with the
    same shard sizes (``X.T @ Y``: local product, then a sum over ranks; replicated result).
    Anything else would need rows of other ranks and raises NotImplementedError."""
    if kwargs:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with keyword arguments ({sorted(kwargs)}); {WAY_OUT}")
    a, b = args[0], args[1]
    local_fn = func
    if func is torch.Tensor.__rmatmul__:
        a, b, local_fn = b, a, torch.matmul
    sts = [t for t in (a, b) if isinstance(t, ShardTensor)]
    ref = reference(func, sts)
    sd_a = shard_dim_of(a.placements) if isinstance(a, ShardTensor) else None
    sd_b = shard_dim_of(b.placements) if isinstance(b, ShardTensor) else None
    how = (f"ShardTensor: {op_name(func)} of shapes {tuple(a.shape)} ({getattr(a, 'placements', 'plain')}) and "
           f"{tuple(b.shape)} ({getattr(b, 'placements', 'plain')})")

    def local(t, r):
        return local_of(func, t, r) if isinstance(t, ShardTensor) else t

    if sd_a is not None and sd_b is None:
        if a.dim() < 2 or sd_a[1] >= a.dim() - 1 or b.dim() > 2:
            raise NotImplementedError(f"{how}: the sharded dim of the left operand is contracted (or "
                                      f"batched); {WAY_OUT}")
        out = local_fn(local(a, a), local(b, a))
        return wrap(func, out, a)  # rows stay where they were (b 1-d drops the last, unsharded dim)
    if sd_b is not None and sd_a is None:
        if b.dim() < 2 or sd_b[1] != b.dim() - 1 or a.dim() > 2:
            raise NotImplementedError(f"{how}: the sharded dim of the right operand is contracted (or "
                                      f"batched); {WAY_OUT}")
        out = local_fn(local(a, b), local(b, b))
        return wrap(func, out, b, out.dim() - b.dim())
    if sd_a is not None and sd_b is not None:
        contracted_b = 0 if b.dim() == 1 else b.dim() - 2
        if a.dim() > 2 or b.dim() > 2 or sd_a[1] != a.dim() - 1 or sd_b[1] != contracted_b or sd_a[0] != sd_b[0]:
            raise NotImplementedError(f"{how}: only the contracted dim may be sharded on both operands; {WAY_OUT}")
        if a.device_mesh != b.device_mesh or a._shard_sizes != b._shard_sizes:
            raise ValueError(f"{how}: operands with different layouts (shard sizes {a._shard_sizes} vs "
                             f"{b._shard_sizes}); redistribute one of them first")
        partial = local_fn(a.to_local(), b.to_local())
        total = all_reduce_sum(partial, group=a.device_mesh.get_group(sd_a[0]))
        return _FromLocal.apply(total, a.device_mesh, tuple(Replicate() for _ in a.placements), None)
    # neither sharded: replicated operands, local product stays replicated
    out = local_fn(local(a, ref), local(b, ref))
    return wrap(func, out, ref)



register(matmul_handler, (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.Tensor.__rmatmul__,
                          torch.mm, torch.Tensor.mm, torch.mv, torch.Tensor.mv))
