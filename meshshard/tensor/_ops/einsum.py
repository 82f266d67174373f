"""``torch.einsum`` with operands sharded along one index (e.g. the points of a point cloud)."""
from __future__ import annotations

import torch

from meshshard.distributed import Replicate, Shard
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import WAY_OUT, is_replicated, local_of, reference, register

__all__ = ["einsum_handler"]


def _subscripts(equation, operands):
    eq = equation.replace(" ", "")
    if "..." in eq:
        raise NotImplementedError(f"ShardTensor: einsum with '...' ({equation!r}); name every index; {WAY_OUT}")
    lhs, _, out = eq.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(operands):
        raise ValueError(f"einsum: {equation!r} names {len(ins)} operands, got {len(operands)}")
    if "->" not in eq:  # implicit output: the indices seen once, sorted
        letters = "".join(ins)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ins, out


def einsum_handler(func, types, args, kwargs):
    """``torch.einsum`` where every sharded operand is sharded along the same index letter, with
    the same layout. That index kept in the output: local, the result sharded along it. Summed
    over: local partial sums, then one all-reduce; the result is replicated (``"bnc,bng->bgc"``
    over sharded points ``n``). Plain / replicated operands carrying the index use this rank's rows."""
    if kwargs:
        raise NotImplementedError(f"ShardTensor: einsum with keyword arguments ({sorted(kwargs)}); {WAY_OUT}")
    equation = args[0]
    operands = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
    ins, out_sub = _subscripts(equation, operands)
    sts = [t for t in operands if isinstance(t, ShardTensor)]
    ref = reference(func, sts)
    sd = shard_dim_of(ref.placements)
    if sd is None:
        return _FromLocal.apply(torch.einsum(equation, *[local_of(func, t, ref) if isinstance(t, ShardTensor)
                                                         else t for t in operands]),
                                ref.device_mesh, tuple(ref.placements), None)
    letter = ins[next(i for i, t in enumerate(operands) if t is ref)][sd[1]]
    mesh_dim, coord = sd[0], ref.device_mesh.get_local_rank(sd[0])
    start, n = ref.offsets(mesh_dim), ref._shard_sizes[coord]
    locals_ = []
    for t, sub in zip(operands, ins):
        if len(sub) != t.dim():
            raise ValueError(f"einsum: subscripts {sub!r} for an operand with {t.dim()} dims")
        if isinstance(t, ShardTensor) and not is_replicated(t):
            tsd = shard_dim_of(t.placements)
            if tsd[0] != mesh_dim or sub[tsd[1]] != letter or t._shard_sizes != ref._shard_sizes:
                raise NotImplementedError(
                    f"ShardTensor: einsum {equation!r}: every sharded operand must be sharded along index "
                    f"{letter!r} with the same shard sizes ({t.placements} sizes {t._shard_sizes} vs "
                    f"{ref.placements} sizes {ref._shard_sizes}); {WAY_OUT}")
            locals_.append(t.to_local())
            continue
        local = local_of(func, t, ref) if isinstance(t, ShardTensor) else t
        if letter in sub:
            k = sub.index(letter)
            if local.shape[k] != ref.shape[sd[1]]:
                raise ValueError(f"einsum {equation!r}: operand {sub!r} has {local.shape[k]} along index "
                                 f"{letter!r}, the sharded operand {ref.shape[sd[1]]}")
            local = local.narrow(k, start, n)
        locals_.append(local)
    out = torch.einsum(equation, *locals_)
    if letter in out_sub:
        placements = tuple(Shard(out_sub.index(letter)) if isinstance(p, Shard) else p for p in ref.placements)
        return _FromLocal.apply(out, ref.device_mesh, placements, ref._shard_sizes)
    total = all_reduce_sum(out, group=ref.device_mesh.get_group(mesh_dim))
    return _FromLocal.apply(total, ref.device_mesh, tuple(Replicate() for _ in ref.placements), None)


register(einsum_handler, (torch.einsum,))
