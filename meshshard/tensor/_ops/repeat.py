"""``repeat`` / ``tile`` of a ShardTensor along dims that are not sharded: local, layout kept.

Repeating a sharded dim ``r > 1`` times would put copies of every rank's rows after the rows of the
other ranks (``[x; x]``), which no rank holds: refused with the way out (repeat an unsharded dim,
or gather first). New leading dims move the Shard dims up.
"""
from __future__ import annotations

import torch

from meshshard.distributed import Shard
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import WAY_OUT, op_name, reference, register, wrap

__all__ = ["repeat_handler"]

_TILE = {torch.tile, torch.Tensor.tile}


def repeat_handler(func, types, args, kwargs):
    """``x.repeat(*sizes)`` / ``torch.tile(x, dims)``: each rank repeats its own shard; the repeat
    count of every sharded dim must be 1."""
    x = args[0] if args else kwargs.get("input")
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as the repeat counts; {WAY_OUT}")
    rest = tuple(args[1:])
    key = "dims" if func in _TILE else "repeats"
    if key in kwargs:
        rest = (kwargs[key],)
    if len(rest) == 1 and not isinstance(rest[0], int):
        rest = tuple(rest[0])
    reps = [int(v) for v in rest]
    if func in _TILE:  # tile pads the counts with leading ones
        reps = [1] * (x.dim() - len(reps)) + reps
    if len(reps) < x.dim():
        raise RuntimeError(f"ShardTensor: {op_name(func)}: number of repeat dims ({len(reps)}) can not be smaller "
                           f"than the number of dims of the tensor ({x.dim()})")
    ref = reference(func, [x])
    shift = len(reps) - x.dim()
    for _, d in shard_dims_of(ref.placements):
        if reps[d + shift] != 1:
            raise NotImplementedError(
                f"ShardTensor: {op_name(func)} {reps} repeats the sharded dim {d} {reps[d + shift]} times; the copies "
                "would follow the rows of every other rank. Repeat only dims that are not sharded, or "
                f"redistribute / full_tensor() first")
    placements = tuple(Shard(p.dim + shift) if isinstance(p, Shard) else p for p in ref.placements)
    return wrap(func, x.to_local().repeat(reps), ref, placements=placements)


register(repeat_handler, (torch.Tensor.repeat, torch.tile, torch.Tensor.tile))
