"""Placements and per-rank shard sizes of a :class:`~meshshard.tensor.ShardTensor`.

A ShardTensor keeps the DTensor description (mesh, placements, global shape) and adds, for the one
mesh dimension that shards the tensor, the size of every rank's shard along the sharded tensor
dimension. Those sizes may differ from rank to rank (and may be zero), unlike DTensor, which
assumes the ``torch.chunk`` layout.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch

from meshshard.distributed import DeviceMesh, DTensorSpec, Partial, Placement, Replicate, Shard, TensorMeta
from meshshard.distributed.agree import agree_on_mesh, dtype_code as _dtype_code, dtype_name, get_validation

__all__ = [
    "normalize_placements",
    "shard_dim_of",
    "shard_dims_of",
    "sizes_by_mesh_dim",
    "pack_sizes",
    "gradient_placements",
    "chunk_sizes",
    "global_shape",
    "make_spec",
    "infer_shard_sizes",
    "normalize_sharding_shapes",
    "resolve_sharding_shapes",
    "layout_signature",
]

_SLOTS = 8  # dims compared one by one in the shape exchange


def normalize_placements(placements, mesh: DeviceMesh) -> Tuple[Placement, ...]:
    """Check placements against ``mesh`` and return them as a tuple.

    ``None`` means ``(Shard(0),)`` (Replicate on any further mesh dims). Several mesh dims may
    Shard, each a different tensor dim (``(Shard(2), Shard(3))``: an image split in height and
    width); the same tensor dim sharded by two mesh dims raises NotImplementedError.

    Args:
        placements: a Placement, a sequence of them (one per mesh dim) or ``None``.
        mesh: the device mesh.

    Returns:
        The placements as a tuple.
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
    dims = [p.dim for p in placements if isinstance(p, Shard)]
    if len(set(dims)) != len(dims):
        raise NotImplementedError("ShardTensor: the same tensor dim sharded by several mesh dims "
                                  f"(got {placements}) is not supported; shard different tensor dims")
    return placements


def shard_dims_of(placements: Sequence[Placement]) -> List[Tuple[int, int]]:
    """``[(mesh_dim, tensor_dim), ...]`` of every Shard placement, in mesh-dim order.

    Args:
        placements: one placement per mesh dim.

    Returns:
        One pair per sharding mesh dim (empty when nothing is sharded).
    """
    return [(m, p.dim) for m, p in enumerate(placements) if isinstance(p, Shard)]


def shard_dim_of(placements: Sequence[Placement]) -> Optional[Tuple[int, int]]:
    """``(mesh_dim, tensor_dim)`` of the Shard placement, or ``None`` when nothing is sharded.

    Raises NotImplementedError when several mesh dims shard: callers written for one sharded dim
    must refuse such tensors loudly rather than compute with the wrong rows.
    """
    sds = shard_dims_of(placements)
    if len(sds) > 1:
        raise NotImplementedError(f"ShardTensor: this operation does not support a tensor sharded on several "
                                  f"mesh dims ({tuple(placements)}); redistribute so one mesh dim shards it")
    return sds[0] if sds else None


def sizes_by_mesh_dim(placements: Sequence[Placement], shard_sizes) -> List[Optional[Tuple[int, ...]]]:
    """Per mesh dim, the shard sizes along its tensor dim (``None`` for a mesh dim that does not Shard).

    Args:
        placements: one placement per mesh dim.
        shard_sizes: a ShardTensor's ``_shard_sizes``: ``None`` (nothing sharded), the sizes of the
            one sharding mesh dim (a flat sequence of ints), or one entry per mesh dim (several
            sharding mesh dims).

    Returns:
        A list with one entry per mesh dim.
    """
    out: List[Optional[Tuple[int, ...]]] = [None] * len(placements)
    sds = shard_dims_of(placements)
    if not sds or shard_sizes is None:
        return out
    if len(sds) == 1 and all(isinstance(v, int) for v in shard_sizes):
        out[sds[0][0]] = tuple(int(v) for v in shard_sizes)
        return out
    for m, _ in sds:
        out[m] = tuple(int(v) for v in shard_sizes[m])
    return out


def pack_sizes(placements: Sequence[Placement], per_mesh_dim) -> Optional[tuple]:
    """Inverse of :func:`sizes_by_mesh_dim`: the ``_shard_sizes`` form of per-mesh-dim sizes.

    Args:
        placements: one placement per mesh dim.
        per_mesh_dim: one entry per mesh dim (sizes or ``None``).

    Returns:
        ``None`` when nothing is sharded, the flat sizes of the one sharding mesh dim, or a tuple with
        one entry per mesh dim (``None`` where it does not Shard) when several mesh dims shard.
    """
    sds = shard_dims_of(placements)
    if not sds:
        return None
    if len(sds) == 1:
        return tuple(int(v) for v in per_mesh_dim[sds[0][0]])
    return tuple(tuple(int(v) for v in per_mesh_dim[m]) if isinstance(p, Shard) else None
                 for m, p in enumerate(placements))


def gradient_placements(placements: Sequence[Placement]) -> Tuple[Placement, ...]:
    """Placements of the gradient of a tensor with ``placements``: Partial becomes Replicate.

    The value of a ``Partial("sum")`` tensor is the sum of the ranks' local tensors, so the
    gradient with respect to every rank's local tensor is the whole gradient: replicated. Labelling
    it Partial would make ``full_tensor()`` sum W copies of it.

    Args:
        placements: one placement per mesh dim.

    Returns:
        The same placements with every Partial replaced by Replicate.
    """
    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)


def chunk_sizes(n: int, parts: int) -> List[int]:
    """Sizes of ``torch.chunk(t, parts)`` along a dim of length ``n``, padded with zeros to ``parts``."""
    if n == 0:
        return [0] * parts
    c = -(-n // parts)
    return [max(0, min(c, n - r * c)) for r in range(parts)]


def global_shape(local_shape: Sequence[int], placements, shard_sizes) -> torch.Size:
    """Global shape: the local shape with every sharded dim replaced by the sum of its shard sizes
    (``shard_sizes`` in either form of :func:`sizes_by_mesh_dim`)."""
    shape = list(local_shape)
    per_dim = sizes_by_mesh_dim(placements, shard_sizes)
    for m, d in shard_dims_of(placements):
        shape[d] = int(sum(per_dim[m]))
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


def _describe(row: List[int]) -> str:
    code, ndim, own = row[0], row[1], row[2]
    dt = dtype_name(code)
    shape = [own if v == -2 else v for v in row[3:3 + min(ndim, _SLOTS)]]
    return f"{dt}{tuple(shape)}"


def _shape_row(local: torch.Tensor, shard_dim: Optional[int]) -> List[int]:
    """``[dtype code, ndim, size along the sharded dim (-1: none), *shape]`` with the sharded dim's
    slot marked -2 and dims beyond ``_SLOTS`` folded into the last slot (so they are compared too)."""
    shape = [int(v) for v in local.shape]
    own = -1
    if shard_dim is not None and shard_dim < len(shape):
        own = shape[shard_dim]
        shape[shard_dim] = -2
    if len(shape) > _SLOTS:
        folded = shape[_SLOTS - 1:]
        shape = shape[:_SLOTS - 1] + [-2 if -2 in folded else math.prod(folded)]
        if -2 in folded:  # keep the other folded dims comparable
            shape[-1] = -3 - math.prod(v for v in folded if v != -2)
    return [_dtype_code(local.dtype), local.dim(), own] + shape + [-1] * (_SLOTS - len(shape))


def infer_shard_sizes(local: torch.Tensor, mesh: DeviceMesh, placements) -> Optional[List[int]]:
    """Exchange local shapes (one small all-gather per mesh dim, on CPU too) and check them.

    Every rank of a mesh-dim group sees the same table, so a dtype / ndim / feature-size mismatch
    raises the same ValueError on every rank instead of hanging a later collective; a final flag
    all-reduce per mesh dim carries the failure to the ranks of the other groups.

    Args:
        local: this rank's local tensor.
        mesh: the device mesh.
        placements: normalized placements (at most one Shard).

    Returns:
        The shard sizes in the ``_shard_sizes`` form of :func:`pack_sizes`: one per rank of the
        sharding mesh dim (one entry per mesh dim when several shard), ``None`` when none does.
    """
    by_mesh_dim = dict(shard_dims_of(placements))
    error = None
    for d in by_mesh_dim.values():
        if d >= local.dim() and error is None:
            error = f"Shard({d}) is out of range for a {local.dim()}-d local tensor"

    def sharded_here(m):
        return m in by_mesh_dim and error is None

    def row(m):
        # A mesh dim's ranks share every other sharded dim's size, so only its own dim is masked.
        return _shape_row(local, by_mesh_dim[m] if sharded_here(m) else None)

    def judge(m, table):
        masked = [list(r) for r in table]
        if sharded_here(m):
            for r in masked:
                r[2] = -2
        if any(r != masked[0] for r in masked):
            what = "sizes outside the sharded dim" if sharded_here(m) else "shapes"
            return (f"ranks of mesh dim {m} disagree on dtype, number of dims or {what}: "
                    + "; ".join(f"rank {i}: {_describe(r)}" for i, r in enumerate(table)))
        return None

    groups = [mesh.get_group(m) for m in range(mesh.ndim)]
    tables = agree_on_mesh("ShardTensor.from_local(sharding_shapes='infer')", groups, row, judge, error)
    per_dim: List[Optional[List[int]]] = [[r[2] for r in tables[m]] if m in by_mesh_dim else None
                                          for m in range(mesh.ndim)]
    return None if not by_mesh_dim else pack_sizes(placements, per_dim)


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


def layout_signature(local: torch.Tensor, mesh: DeviceMesh, placements, shard_sizes=None) -> List[int]:
    """Integers that every rank of a consistent ShardTensor agrees on, of a length fixed by the mesh:
    dtype, ndim, the local shape outside the sharded dim, one code per placement and the shard
    sizes (padded to the mesh size). Compared across ranks by :func:`resolve_sharding_shapes`.

    Args:
        local: this rank's local tensor.
        mesh: the device mesh.
        placements: normalized placements (one per mesh dim).
        shard_sizes: the shard sizes along the sharded dim, or ``None`` (not compared).
    """
    sds = shard_dims_of(placements)
    row = _shape_row(local, sds[0][1] if sds else None)
    for _, d in sds[1:]:  # further sharded dims differ between ranks too
        if d < _SLOTS - 1:
            row[3 + d] = -2
    row = row[:2] + row[3:]  # this rank's own size along the sharded dim may differ: leave it out
    codes = [0 if isinstance(p, Replicate) else 1 if isinstance(p, Partial) else 2 + p.dim for p in placements]
    codes = (codes + [-1] * mesh.ndim)[:mesh.ndim]
    total = mesh.size()
    per_dim = sizes_by_mesh_dim(placements, shard_sizes)
    sizes = [v for sz in per_dim if sz is not None for v in sz][:total]
    return row + codes + sizes + [-1] * (total - len(sizes))


def _describe_signature(sig: List[int], mesh_ndim: int) -> str:
    code, ndim = sig[0], sig[1]
    dt = dtype_name(code)
    shape = ", ".join("n" if v == -2 else str(v) for v in sig[2:2 + min(ndim, _SLOTS)])
    codes = sig[2 + _SLOTS:2 + _SLOTS + mesh_ndim]
    names = ", ".join("Replicate()" if c == 0 else "Partial()" if c == 1 else f"Shard({c - 2})" for c in codes)
    sizes = [v for v in sig[2 + _SLOTS + mesh_ndim:] if v != -1]
    return f"{dt}({shape}) ({names})" + (f" sizes {sizes}" if sizes else "")


def resolve_sharding_shapes(what: str, sharding_shapes, mesh: DeviceMesh, placements,
                            local_shape: Optional[Sequence[int]] = None, coordinate: Optional[int] = None,
                            total: Optional[int] = None, signature: Optional[List[int]] = None) -> Optional[List[int]]:
    """:func:`normalize_sharding_shapes`, then check that every rank of ``mesh`` passed the same
    layout (and that it sums to ``total``), raising the same error on every rank.

    A layout that is wrong on one rank only would otherwise raise there alone and leave the other
    ranks waiting in the next collective. The check is one all-gather of a few integers per mesh
    dim (with ``signature``, also the tensor's dtype, feature shape, placements and current
    sizes, so the exchange that follows needs no check of its own); it follows
    :func:`meshshard.distributed.validation` (off: local checks only, and every rank
    must pass the same layout).

    Args:
        what: the calling operation, for messages.
        sharding_shapes: as in :func:`normalize_sharding_shapes`.
        mesh: the device mesh.
        placements: normalized target placements.
        local_shape: this rank's local shape, checked against its entry (``None``: skip).
        coordinate: this rank's index along the sharding mesh dim (for that check).
        total: required sum of the sizes (the global size along the sharded dim), or ``None``;
            with several sharding mesh dims, one per sharding mesh dim in mesh-dim order.
        signature: :func:`layout_signature` of the tensor concerned, compared too (``None``: skip).

    Returns:
        The shard sizes along the sharded dim (``None`` when nothing is sharded); with several
        sharding mesh dims, one entry per mesh dim (the :func:`pack_sizes` form), each resolved
        and checked as above from ``sharding_shapes[mesh_dim]`` (a dict is then required).
    """
    sds = shard_dims_of(placements)
    if len(sds) > 1:
        if not isinstance(sharding_shapes, dict):
            raise ValueError(f"{what}: several mesh dims shard the tensor; give sharding_shapes as a dict "
                             "{mesh_dim: [local shape of every rank along mesh_dim]}")
        per_dim: List[Optional[List[int]]] = [None] * mesh.ndim
        for k, (m, d) in enumerate(sds):
            view = tuple(p if i == m else Replicate() for i, p in enumerate(placements))
            per_dim[m] = resolve_sharding_shapes(
                what, sharding_shapes, mesh, view, local_shape,
                None if local_shape is None else mesh.get_local_rank(m),
                None if total is None else total[k], signature if k == 0 else None)
        return pack_sizes(placements, per_dim)
    if total is not None and not isinstance(total, int):
        total = total[0] if len(total) else None
    sd = shard_dim_of(placements)
    errors: List[str] = []
    sizes = None
    try:
        sizes = normalize_sharding_shapes(sharding_shapes, local_shape, mesh, placements, coordinate)
    except (TypeError, ValueError) as exc:
        errors.append(str(exc))
    if sizes is not None and total is not None and sum(sizes) != total:
        errors.append(f"sharding_shapes sum to {sum(sizes)} along dim {sd[1]}, but the tensor has {total}")
    if sd is None or mesh.size() == 1 or not get_validation():
        if errors:
            raise ValueError(f"{what}: {'; '.join(errors)}")
        return sizes
    n = mesh.size(sd[0])
    sig = list(signature or [])
    row = (list(sizes) if sizes is not None and len(sizes) == n else [-1] * n) + sig

    def judge(m, table):
        if any(r[:n] != table[0][:n] for r in table):
            return (f"ranks of mesh dim {m} passed different sharding_shapes: "
                    + "; ".join(f"rank {i}: {r[:n]}" for i, r in enumerate(table)))
        if any(r[n:] != table[0][n:] for r in table):
            return (f"ranks of mesh dim {m} hold tensors that do not match (dtype, shape outside the sharded dim, "
                    "placements or shard sizes): "
                    + "; ".join(f"rank {i}: {_describe_signature(r[n:], mesh.ndim)}" for i, r in enumerate(table)))
        return None

    agree_on_mesh(what, [mesh.get_group(m) for m in range(mesh.ndim)], lambda m: row, judge,
                  "; ".join(errors) if errors else None)
    return sizes
