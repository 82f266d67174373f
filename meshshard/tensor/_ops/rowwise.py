"""Row-wise ops that mix values only inside a row (``linear``, ``rms_norm`` / ``softmax`` /
``normalize`` over feature dims, and ``layer_norm`` over them, which :mod:`.norm` hands here):
local, unless they mix the sharded dim."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import local_of, norm_dims, op_name, reference, register, wrap

__all__ = ["rowwise_handler"]


def _mixed_dims(func, args, kwargs, ndim):
    """Dims a row-wise op combines values across."""
    if func is F.linear:
        return [ndim - 1]
    if func in (F.layer_norm, getattr(F, "rms_norm", None)):
        ns = args[1] if len(args) > 1 else kwargs["normalized_shape"]
        ns = [ns] if isinstance(ns, int) else list(ns)
        return list(range(ndim - len(ns), ndim))
    if func is F.normalize:
        dim = args[2] if len(args) > 2 else kwargs.get("dim", 1)
        return norm_dims(dim, ndim)
    # softmax family: (input, dim, ...)
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} without an explicit dim")
    return norm_dims(dim, ndim)


def rowwise_handler(func, types, args, kwargs):
    """Ops that mix values only inside a row (feature dims): local, unless they mix the sharded dim."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter "
                                  "(only the input may be a ShardTensor); use .to_local()")
    ref = reference(func, [x])
    mixed = _mixed_dims(func, args, kwargs, x.dim())
    hit = [d for _, d in shard_dims_of(ref.placements) if d in mixed]
    if hit:
        raise NotImplementedError(
            f"ShardTensor: {op_name(func)} over the sharded dim {hit[0]} would need rows of other ranks; "
            "register a handler with ShardTensor.register_function_handler or redistribute first")
    largs, lkwargs = pytree.tree_map(
        lambda t: local_of(func, t, ref) if isinstance(t, ShardTensor) else t, (args, kwargs))
    return wrap(func, func(*largs, **lkwargs), ref)



register(rowwise_handler, (F.linear, F.normalize, torch.softmax, torch.log_softmax,
                           torch.Tensor.softmax, torch.Tensor.log_softmax, F.softmax, F.log_softmax,
                           getattr(F, "rms_norm", None)))
