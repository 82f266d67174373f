"""Dim permutations (``t``, ``.T``, ``.mT``, ``transpose``, ``swapaxes``, ``permute``)."""
from __future__ import annotations

import torch

from meshshard.distributed import Shard
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import WAY_OUT, op_name, reference, register, wrap

__all__ = ["permute_handler"]


def permute_handler(func, types, args, kwargs):
    """Dim permutations (``t``, ``.T``, ``.mT``, ``transpose``, ``swapaxes``, ``permute``): local,
    the Shard placement follows its dim to the new position, shard sizes unchanged."""
    x = args[0] if args else kwargs["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; {WAY_OUT}")
    ref = reference(func, [x])
    rest = args[1:] if args else ()
    kw = {k: v for k, v in kwargs.items() if k != "input"}
    placements = tuple(ref.placements)
    if shard_dims_of(placements):
        # Where do the sharded dims go? Apply the same op to a meta tensor whose strides name
        # the dims (a permutation permutes the strides).
        n = x.dim()
        probe = torch.empty_strided(tuple(x._local_tensor.shape), [1 << k for k in range(n)], device="meta")
        moved = func(probe, *rest, **kw)
        strides = list(moved.stride())
        if moved.dim() != n or sorted(strides) != [1 << k for k in range(n)]:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} is not a permutation of dims here; {WAY_OUT}")
        placements = tuple(Shard(strides.index(1 << p.dim)) if isinstance(p, Shard) else p for p in placements)
    out = func(x.to_local(), *rest, **kw)
    return wrap(func, out, ref, placements=placements)



register(permute_handler, (torch.t, torch.Tensor.t, torch.transpose, torch.Tensor.transpose, torch.swapaxes,
                           torch.Tensor.swapaxes, torch.swapdims, torch.Tensor.swapdims, torch.permute,
                           torch.Tensor.permute, torch.Tensor.T.__get__, torch.Tensor.mT.__get__))
