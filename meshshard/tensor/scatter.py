"""``scatter_tensor``: split one rank's full tensor into uneven shards, sending each rank only its rows."""
from __future__ import annotations

from typing import Optional

import torch

from meshshard.distributed import DeviceMesh, Partial, Shard, broadcast, default_device_mesh
from meshshard.distributed.agree import DTYPES as _DTYPES, dtype_code as _dtype_code
from meshshard.distributed.autograd import scatter_v
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import (_SLOTS, chunk_sizes, normalize_placements, resolve_sharding_shapes, shard_dims_of,
                                   sizes_by_mesh_dim)

__all__ = ["scatter_tensor"]


def _coords_of(mesh: DeviceMesh, global_rank: int):
    hits = (mesh.mesh == global_rank).nonzero()
    if hits.numel() == 0:
        raise ValueError(f"scatter_tensor: global_src={global_rank} is not a rank of the device mesh")
    return [int(c) for c in hits[0]]


def _broadcast_along(t: torch.Tensor, mesh: DeviceMesh, dims, src_coords) -> torch.Tensor:
    """Broadcast from ``src_coords`` along each of ``dims`` in turn (after dim k, every rank whose
    coordinates on the remaining dims match the source's holds the source's data)."""
    mine = [mesh.get_local_rank(k) for k in range(mesh.ndim)]
    for k in dims:
        if mesh.size(k) == 1:
            continue
        root = list(mine)
        root[k] = src_coords[k]
        broadcast(t, src=int(mesh.mesh[tuple(root)]), group=mesh.get_group(k))
    return t


def scatter_tensor(tensor: Optional[torch.Tensor], global_src: int, mesh: Optional[DeviceMesh] = None,
                   placements=None, sharding_shapes=None, requires_grad: bool = False) -> ShardTensor:
    """Split ``tensor`` held by rank ``global_src`` into a ShardTensor.

    Only ``global_src`` needs the tensor (other ranks may pass ``None``); dtype and shape travel
    as a few integers, then each rank of the source's shard group receives only its own rows
    (:func:`meshshard.distributed.autograd.scatter_v`, not a broadcast of the whole tensor), and
    ranks on Replicate mesh dims get a copy of their shard.

    Args:
        tensor: the full tensor on ``global_src``.
        global_src: global rank that holds it.
        mesh: device mesh (``None``: the default 1-D mesh).
        placements: ``None``: ``(Shard(0),)``; Replicate or Shard (other tensor dims) on other
            mesh dims.
        sharding_shapes: shard layout as in :meth:`ShardTensor.from_local`
            (``None``: the ``torch.chunk`` layout).
        requires_grad: make the result a leaf that requires grad.

    Returns:
        ShardTensor holding this rank's rows.
    """
    mesh = default_device_mesh() if mesh is None else mesh
    placements = normalize_placements(placements, mesh)
    if any(isinstance(p, Partial) for p in placements):
        raise ValueError("scatter_tensor: Partial placements cannot be scattered")
    src_coords = _coords_of(mesh, global_src)
    is_src = [mesh.get_local_rank(k) for k in range(mesh.ndim)] == src_coords
    meta = torch.full((2 + _SLOTS + 1,), -1, dtype=torch.int64)
    if is_src:
        if not isinstance(tensor, torch.Tensor):
            meta[0] = -2  # tell every rank, so all raise
        elif tensor.dim() > _SLOTS:
            meta[0] = -3
        else:
            meta[0], meta[1] = _dtype_code(tensor.dtype), tensor.dim()
            meta[2:2 + tensor.dim()] = torch.tensor(tensor.shape, dtype=torch.int64)
    _broadcast_along(meta, mesh, range(mesh.ndim), src_coords)
    code, ndim = int(meta[0]), int(meta[1])
    if code == -2:
        raise TypeError("scatter_tensor: the source rank passed no tensor")
    if code < 0 or code >= len(_DTYPES):
        raise ValueError(f"scatter_tensor: unsupported tensor (dtype code {code} or more than {_SLOTS} dims)")
    dtype, shape = _DTYPES[code], [int(v) for v in meta[2:2 + ndim]]
    placements = tuple(Shard(p.dim % max(ndim, 1)) if isinstance(p, Shard) and p.dim < 0 else p for p in placements)
    sds = shard_dims_of(placements)
    device = tensor.device if is_src else torch.device(mesh.device_type if mesh.device_type != "cpu" else "cpu")
    if not sds:
        buf = tensor.detach().clone() if is_src else torch.empty(shape, dtype=dtype, device=device)
        local = _broadcast_along(buf, mesh, range(mesh.ndim), src_coords)
        return ShardTensor.from_local(local, mesh, placements, sharding_shapes={}).requires_grad_(requires_grad)
    for _, d in sds:
        if d >= ndim:
            raise ValueError(f"scatter_tensor: Shard({d}) of a {ndim}-d tensor")
    if sharding_shapes is None:
        per_dim = [None] * mesh.ndim
        for m, d in sds:
            per_dim[m] = chunk_sizes(shape[d], mesh.size(m))
    else:
        totals = [shape[d] for _, d in sds]
        per_dim = sizes_by_mesh_dim(placements, resolve_sharding_shapes(
            "scatter_tensor", sharding_shapes, mesh, placements, total=totals[0] if len(totals) == 1 else totals))
    mine = [mesh.get_local_rank(k) for k in range(mesh.ndim)]
    # Scatter along one sharding mesh dim at a time: after step k, every rank whose coordinates
    # match the source's on the mesh dims not yet scattered holds its block of the scattered dims.
    local = tensor.detach() if is_src else None
    done = set()
    with torch.no_grad():
        for m, d in sds:
            holds = all(mine[k] == src_coords[k] for k in range(mesh.ndim) if k not in done and k != m)
            if holds:
                if local is None:  # a carrier of dtype and the other sizes only: no data travels here
                    carrier_shape = _block_shape(shape, sds, per_dim, mine, done)
                    carrier_shape[d] = 0
                    local = torch.empty(carrier_shape, dtype=dtype, device=device)
                local = scatter_v(local, list(per_dim[m]), dim=d, src=src_coords[m],
                                  group=mesh.get_group(m)).contiguous()
            done.add(m)
    if local is None:
        local = torch.empty(_block_shape(shape, sds, per_dim, mine, done), dtype=dtype, device=device)
    local = _broadcast_along(local, mesh, [k for k in range(mesh.ndim) if k not in done], src_coords)
    st = ShardTensor.from_local(local, mesh, placements,
                                sharding_shapes={m: list(per_dim[m]) for m, _ in sds})
    return st.requires_grad_(requires_grad) if requires_grad else st


def _block_shape(shape, sds, per_dim, coords, scattered):
    """This rank's block of ``shape`` once the mesh dims in ``scattered`` have split it."""
    out = list(shape)
    for m, d in sds:
        if m in scattered:
            out[d] = per_dim[m][coords[m]]
    return out
