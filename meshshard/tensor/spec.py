"""Placements and per-rank shard sizes of a :class:`~meshshard.tensor.ShardTensor`.

A ShardTensor keeps the DTensor description (mesh, placements, global shape) and adds, for the one
mesh dimension that shards the tensor, the size of every rank's shard along the sharded tensor
dimension. Those sizes may differ from rank to rank (and may be zero), unlike DTensor, which
assumes the ``torch.chunk`` layout.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch

from meshshard.distributed import (DeviceMesh, DTensorSpec, Partial, Placement, Replicate, Shard, TensorMeta,
                                   all_gather_sizes, all_reduce)

__all__ = [
    "normalize_placements",
    "shard_dim_of",
    "chunk_sizes",
    "global_shape",
    "make_spec",
    "infer_shard_sizes",
    "normalize_sharding_shapes",
]

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
           torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]
_SLOTS = 8  # dims compared one by one in the shape exchange


def normalize_placements(placements, mesh: DeviceMesh) -> Tuple[Placement, ...]:
    """Check placements against ``mesh`` and return them as a tuple.

    ``None`` means ``(Shard(0),)`` (Replicate on any further mesh dims). At most one placement may
    be :class:`Shard`: a ShardTensor is split along one tensor dim.
    """
    if placements is None:
        placements = (Shard(0),) + (Replicate(),) * (mesh.ndim - 1)
    if isinstance(placements, Placement):
        placements = (placements,)
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"ShardTensor: {len(placements)} placements given for a {mesh.ndim}-D device mesh")
    for p in placements:
        if not isinstance(p, (Shard, Replicate, Partial)):
            raise TypeError(f"ShardTensor: unsupported placement {p!r} (use Shard, Replicate or Partial)")
        if isinstance(p, Partial) and p.reduce_op != "sum":
            raise NotImplementedError(f"ShardTensor: only Partial('sum') is supported, got {p!r}")
    if sum(isinstance(p, Shard) for p in placements) > 1:
        raise NotImplementedError("ShardTensor: at most one mesh dim may Shard the tensor "
                                  f"(got {placements}); use Replicate on the others")
    return placements


def shard_dim_of(placements: Sequence[Placement]) -> Optional[Tuple[int, int]]:
    """``(mesh_dim, tensor_dim)`` of the Shard placement, or ``None`` when nothing is sharded."""
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            return m, p.dim
    return None


def chunk_sizes(n: int, parts: int) -> List[int]:
    """Sizes of ``torch.chunk(t, parts)`` along a dim of length ``n``, padded with zeros to ``parts``."""
    if n == 0:
        return [0] * parts
    c = -(-n // parts)
    return [max(0, min(c, n - r * c)) for r in range(parts)]


def global_shape(local_shape: Sequence[int], placements, shard_sizes: Optional[Sequence[int]]) -> torch.Size:
    """Global shape: the local shape with the sharded dim replaced by ``sum(shard_sizes)``."""
    shape = list(local_shape)
    sd = shard_dim_of(placements)
    if sd is not None:
        shape[sd[1]] = int(sum(shard_sizes))
    return torch.Size(shape)


def _contiguous_stride(shape: Sequence[int]) -> Tuple[int, ...]:
    stride, acc = [], 1
    for s in reversed(list(shape)):
        stride.append(acc)
        acc *= max(int(s), 1)
    return tuple(reversed(stride))


def make_spec(mesh: DeviceMesh, placements, local: torch.Tensor, shard_sizes) -> DTensorSpec:
    """The DTensorSpec (global shape, contiguous stride, dtype) of a ShardTensor."""
    shape = global_shape(local.shape, placements, shard_sizes)
    meta = TensorMeta(shape, _contiguous_stride(shape), local.dtype)
    return DTensorSpec(mesh, tuple(placements), tensor_meta=meta)


def _dtype_code(dtype: torch.dtype) -> int:
    return _DTYPES.index(dtype) if dtype in _DTYPES else 1000 + sum(ord(c) for c in str(dtype))


def _describe(row: List[int]) -> str:
    code, ndim = row[0], row[1]
    dt = str(_DTYPES[code]).replace("torch.", "") if 0 <= code < len(_DTYPES) else f"dtype#{code}"
    return f"{dt}{tuple(row[2:2 + min(ndim, _SLOTS)])}"


def infer_shard_sizes(local: torch.Tensor, mesh: DeviceMesh, placements) -> Optional[List[int]]:
    """Exchange local shapes (one small all-gather per mesh dim, on CPU too) and check them.

    Every rank of a mesh-dim group sees the same table, so a dtype / ndim / feature-size mismatch
    raises the same ValueError on every rank instead of hanging a later collective; a final flag
    all-reduce per mesh dim carries the failure to the ranks of the other groups.

    Returns:
        The shard sizes along the sharded tensor dim, one per rank of the sharding mesh dim, or
        ``None`` when no placement is Shard.
    """
    sd = shard_dim_of(placements)
    row = [_dtype_code(local.dtype), local.dim()] + [int(s) for s in local.shape[:_SLOTS]]
    row += [-1] * (2 + _SLOTS - len(row))
    error, sizes = None, None
    if sd is not None and sd[1] >= local.dim():
        error = f"Shard({sd[1]}) is out of range for a {local.dim()}-d local tensor"
    for m in range(mesh.ndim):
        table = all_gather_sizes(row, mesh.get_group(m)).tolist()
        sharded_here = sd is not None and sd[0] == m
        masked = [list(r) for r in table]
        if sharded_here and error is None:
            d = sd[1]
            if d < _SLOTS:
                for r in masked:
                    r[2 + d] = -2
                sizes = [r[2 + d] for r in table]
            else:
                sizes = [int(local.shape[d])] * len(table)  # beyond the exchanged slots: assume even
        if error is None and any(r != masked[0] for r in masked):
            what = "sizes outside the sharded dim" if sharded_here else "shapes"
            error = (f"ranks of mesh dim {m} disagree on dtype, number of dims or {what}: "
                     + "; ".join(f"rank {i}: {_describe(r)}" for i, r in enumerate(table)))
    # Carry any failure across every mesh-dim group, so all ranks raise (no rank left waiting).
    flag = torch.tensor([0 if error is None else 1], dtype=torch.int64)
    for m in range(mesh.ndim):
        all_reduce(flag, group=mesh.get_group(m))
    if error is not None:
        raise ValueError(f"ShardTensor.from_local(sharding_shapes='infer'): {error}")
    if int(flag.item()) != 0:
        raise ValueError("ShardTensor.from_local(sharding_shapes='infer'): another rank of the mesh "
                         "passed a local tensor whose dtype or shape does not match (see its error)")
    return sizes


def normalize_sharding_shapes(sharding_shapes, local_shape: Optional[Sequence[int]], mesh: DeviceMesh, placements,
                              coordinate: Optional[int] = None) -> Optional[List[int]]:
    """Turn a user ``sharding_shapes`` value into the list of shard sizes along the sharded dim.

    Args:
        sharding_shapes: ``{mesh_dim: [shape_of_rank_0, shape_of_rank_1, ...]}`` (every rank's
            local shape along that mesh dim), or the shorthand ``{mesh_dim: [n0, n1, ...]}`` /
            ``[n0, n1, ...]`` of sizes along the sharded tensor dim.
        local_shape: this rank's local shape (checked against its entry), or ``None`` to skip.
        coordinate: this rank's index along the sharding mesh dim (for the check).

    Returns:
        Shard sizes, or ``None`` when no placement is Shard.
    """
    sd = shard_dim_of(placements)
    if sd is None:
        return None
    m, d = sd
    entries = sharding_shapes
    if isinstance(sharding_shapes, dict):
        if m not in sharding_shapes:
            raise ValueError(f"sharding_shapes has no entry for the sharding mesh dim {m} (keys: {list(sharding_shapes)})")
        entries = sharding_shapes[m]
    if isinstance(entries, torch.Tensor):
        entries = entries.tolist()
    if not isinstance(entries, (list, tuple)):
        raise TypeError(f"sharding_shapes: expected a dict or list, got {type(sharding_shapes).__name__}")
    n = mesh.size(m)
    if len(entries) != n:
        raise ValueError(f"sharding_shapes gives {len(entries)} entries but mesh dim {m} has {n} ranks")
    sizes = []
    for r, e in enumerate(entries):
        if isinstance(e, int):
            s = e
        else:
            shape = [int(v) for v in e]
            if local_shape is not None:
                other = [v for i, v in enumerate(shape) if i != d]
                mine = [v for i, v in enumerate(local_shape) if i != d]
                if len(shape) != len(local_shape) or other != mine:
                    raise ValueError(f"sharding_shapes[{m}][{r}]={tuple(shape)} does not match the local "
                                     f"shape {tuple(local_shape)} outside the sharded dim {d}")
            if d >= len(shape):
                raise ValueError(f"sharding_shapes[{m}][{r}]={tuple(shape)} has no dim {d}")
            s = shape[d]
        if s < 0:
            raise ValueError(f"sharding_shapes: negative size {s} for rank {r}")
        sizes.append(int(s))
    if local_shape is not None and coordinate is not None and len(local_shape) > d:
        if sizes[coordinate] != local_shape[d]:
            raise ValueError(f"sharding_shapes says rank {coordinate} of mesh dim {m} holds {sizes[coordinate]} "
                             f"along dim {d}, but its local tensor has {local_shape[d]}")
    return sizes
