"""Joining tensors: ``torch.cat`` / ``concat`` along a dim that is not sharded, and ``torch.stack``
along any dim (a new dim: the Shard dims at or after it move one up)."""
from __future__ import annotations

import torch

from meshshard.distributed import Shard
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import layout, local_of, op_name, promote_plain, reference, register, wrap

__all__ = ["cat_handler", "stack_handler"]


def _tensors_and_dim(args, kwargs):
    tensors = args[0] if args else kwargs["tensors"]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    return list(tensors), dim


def _locals(func, tensors, ref):
    """Local tensors laid out like ``ref``: ShardTensors of its layout (or replicated ones, and plain
    tensors promoted to Replicate) give the rows that meet this rank's shard."""
    return [local_of(func, t, ref, align=True) if isinstance(t, ShardTensor) else promote_plain(func, t, ref)
            for t in tensors]


def cat_handler(func, types, args, kwargs):
    """``torch.cat`` along a dim that is not sharded."""
    tensors, dim = _tensors_and_dim(args, kwargs)
    sts = [t for t in tensors if isinstance(t, ShardTensor)]
    ref = reference(func, sts)
    sharded = [d for _, d in shard_dims_of(ref.placements)]
    if dim % ref.dim() in sharded:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} along the sharded dim {dim % ref.dim()}; "
                                  "register a handler with ShardTensor.register_function_handler")
    return wrap(func, func(_locals(func, tensors, ref), dim), ref)


def stack_handler(func, types, args, kwargs):
    """``torch.stack(tensors, dim)`` of ShardTensors of one layout (replicated ShardTensors and plain
    tensors, promoted to Replicate, join them with the rows that meet each shard): a local stack.
    The result keeps the layout, every Shard dim at or after ``dim`` moved one up (stacking before
    the sharded dim shifts it), the shard sizes unchanged. Any dim works, the sharded one too,
    since a new dim of size ``len(tensors)`` never splits a rank's rows. Partial ShardTensors of one
    layout stay Partial (stacking is linear)."""
    tensors, dim = _tensors_and_dim(args, kwargs)
    if kwargs.get("out") is not None:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with out=; use the returned tensor")
    sts = [t for t in tensors if isinstance(t, ShardTensor)]
    alike = len(sts) == len(tensors) and all(layout(t) == layout(sts[0]) for t in sts)
    ref = sts[0] if alike else reference(func, sts)  # one layout: Partial ones stay Partial (stacking is linear)
    ndim = ref.dim() + 1
    if not -ndim <= dim < ndim:
        raise IndexError(f"ShardTensor: {op_name(func)}: dim {dim} out of range for {ndim - 1}-d tensors")
    dim %= ndim
    for t in tensors:
        if tuple(t.shape) != tuple(ref.shape):
            raise RuntimeError(f"ShardTensor: {op_name(func)} expects each tensor to be of equal global shape, "
                               f"got {tuple(t.shape)} and {tuple(ref.shape)}")
    placements = tuple(Shard(p.dim + 1) if isinstance(p, Shard) and p.dim >= dim else p for p in ref.placements)
    locals_ = [t.to_local() for t in tensors] if alike else _locals(func, tensors, ref)
    return wrap(func, torch.stack(locals_, dim), ref, placements=placements)


register(cat_handler, (torch.cat, torch.concat, getattr(torch, "concatenate", None)))
register(stack_handler, (torch.stack,))
