"""``torch.cat`` / ``concat`` along a dim that is not sharded."""
from __future__ import annotations

import torch

from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import local_of, op_name, promote_plain, reference, register, wrap

__all__ = ["cat_handler"]


def cat_handler(func, types, args, kwargs):
    """``torch.cat`` along a dim that is not sharded."""
    tensors = args[0] if args else kwargs["tensors"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    sts = [t for t in tensors if isinstance(t, ShardTensor)]
    ref = reference(func, sts)
    sharded = [d for _, d in shard_dims_of(ref.placements)]
    if dim % ref.dim() in sharded:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} along the sharded dim {dim % ref.dim()}; "
                                  "register a handler with ShardTensor.register_function_handler")
    locals_ = [local_of(func, t, ref, align=True) if isinstance(t, ShardTensor) else promote_plain(func, t, ref)
               for t in tensors]
    return wrap(func, func(locals_, dim), ref)



register(cat_handler, (torch.cat, torch.concat, getattr(torch, "concatenate", None)))
