"""Neighbourhood attention as NATTEN defines it, on plain tensors and on ShardTensors sharded along
one or more spatial dims.

Layout (NATTEN's, ``natten.functional.na1d / na2d / na3d``): ``[B, *spatial, heads, head_dim]``,
with 1, 2 or 3 spatial dims.

The window, per spatial dim of length ``n`` (kernel ``K``, stride ``s``, dilation ``d``), for the
query at coordinate ``x``:

* dilation groups: the coordinates are split into ``d`` interleaved groups ``g = x % d``; a query
  only sees keys of its own group, and within the group coordinates are ``x // d``, the group
  holding ``ceil((n - g) / d)`` of them;
* non-causal: the window of ``K`` group coordinates is centred on the query (``K // 2`` to the left,
  ``K - 1 - K // 2`` to the right) and SHIFTED inside the group near its ends, so every query sees
  exactly ``K`` keys; with a stride, the queries of a stride group (``s`` consecutive group
  coordinates) share the window of their centre query (the right one of the two centres for an even
  ``s``, the last query of a group cut by the end);
* causal: the keys at or before the query, the window ending at the query (``K`` keys, fewer near
  the start, never shifted); with a stride, the window starts ``K - 1`` before the stride group's
  last query.

A key is seen when it is inside the window in every spatial dim (the window is the product of the
per-dim windows), and the query attends to it with softmax over those keys.

Each rank of a sharded computation fetches the contiguous key / value rows its queries' windows
reach along every sharded dim (:func:`meshshard.distributed.neighbors.fetch_ranges`, one exchange
per sharded dim, the second one on the rows the first one brought, so corner halos come along;
shards thinner than the halo are crossed), then computes locally. The exchanges are
differentiable, so the gradients of q, k and v equal one process's.
"""
from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import torch

from meshshard.distributed.neighbors import fetch_ranges
from meshshard.tensor.spec import shard_dims_of, sizes_by_mesh_dim

__all__ = ["window_keys", "key_range", "local_neighborhood_attention", "plain_neighborhood_attention",
           "sharded_neighborhood_attention"]


def _acc_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def window_keys(positions: torch.Tensor, n: int, kernel: int, stride: int, dilation: int,
                causal: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """The keys of the queries at ``positions`` along one spatial dim, by NATTEN's window rule
    (see the module docstring).

    Args:
        positions: ``[P]`` int64 global query coordinates in ``[0, n)``.
        n: the dim's length (``kernel * dilation <= n``).
        kernel, stride, dilation: the dim's kernel size, stride and dilation.
        causal: whether the dim is causal.

    Returns:
        ``(keys, valid)``, both ``[P, kernel]``: the global key coordinates and whether each is in
        the window (only causal windows near the start have invalid slots; those hold the query's
        own coordinate, so they index a row that is always there).
    """
    x = positions.to(torch.long)
    g, xi = x % dilation, x // dilation
    group_len = (n - g + dilation - 1) // dilation
    j = torch.arange(kernel, dtype=torch.long, device=x.device)
    if causal:
        leader = torch.minimum((xi // stride) * stride + stride - 1, group_len - 1)
        yi = (leader - kernel + 1)[:, None] + j
        valid = (yi >= 0) & (yi <= xi[:, None])
    else:
        left, right = kernel // 2, kernel - 1 - kernel // 2
        leader = torch.minimum((xi // stride) * stride + stride // 2, group_len - 1)
        center = torch.minimum(leader.clamp_min(left), group_len - 1 - right)
        yi = (center - left)[:, None] + j
        valid = torch.ones_like(yi, dtype=torch.bool)
    keys = torch.where(valid, yi * dilation + g[:, None], x[:, None])
    return keys, valid


def key_range(start: int, stop: int, n: int, kernel: int, stride: int, dilation: int,
              causal: bool) -> Tuple[int, int]:
    """The contiguous global key rows ``[lo, hi)`` that the windows of the queries ``[start, stop)``
    reach along one dim (``(start, start)`` for no queries).

    Args:
        start, stop: the queries' global coordinates.
        n, kernel, stride, dilation, causal: as in :func:`window_keys`.

    Returns:
        ``(lo, hi)`` with ``0 <= lo <= hi <= n``.
    """
    if stop <= start:
        return start, start
    keys, valid = window_keys(torch.arange(start, stop), n, kernel, stride, dilation, causal)
    keys = keys[valid]
    return int(keys.min()), int(keys.max()) + 1


def local_neighborhood_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 keys: Sequence[torch.Tensor], valid: Sequence[torch.Tensor],
                                 scale: float) -> torch.Tensor:
    """Attention of every query to its window's keys, given per-dim key indices (differentiable).

    Args:
        q: ``[B, S_1, .., S_D, Hq, E]`` queries.
        k: ``[B, T_1, .., T_D, Hk, E]`` keys (``Hq`` a multiple of ``Hk``; query head ``h`` uses key
            head ``h // (Hq // Hk)``).
        v: ``[B, T_1, .., T_D, Hk, Ev]`` values.
        keys: per spatial dim ``i``, ``[S_i, K_i]`` int64 indices into ``k``'s dim ``1 + i``.
        valid: per spatial dim, ``[S_i, K_i]`` bool: the slots that are in the window.
        scale: score scale.

    Returns:
        ``[B, S_1, .., S_D, Hq, Ev]`` in ``q``'s dtype (computed in float64 for float64 input and in
        float32 otherwise).
    """
    nd = len(keys)
    acc = _acc_dtype(q.dtype)
    if k.shape[-2] != q.shape[-2]:
        rep = q.shape[-2] // k.shape[-2]
        k, v = k.repeat_interleave(rep, dim=-2), v.repeat_interleave(rep, dim=-2)
    kv = torch.cat([k.to(acc), v.to(acc)], dim=-1)
    for i in range(nd):  # gather the windows dim by dim: [B, S_1, K_1, .., S_D, K_D, H, E + Ev]
        d = 1 + 2 * i
        kv = kv.index_select(d, keys[i].reshape(-1)).unflatten(d, tuple(keys[i].shape))
    order = [0] + [1 + 2 * i for i in range(nd)] + [2 * nd + 1] + [2 + 2 * i for i in range(nd)] + [2 * nd + 2]
    kv = kv.permute(order)  # [B, S_1, .., S_D, H, K_1, .., K_D, E + Ev]
    kv = kv.reshape(kv.shape[:nd + 2] + (math.prod(int(t.shape[1]) for t in keys), kv.shape[-1]))
    kk, vv = kv[..., :q.shape[-1]], kv[..., q.shape[-1]:]
    scores = torch.matmul(q.to(acc).unsqueeze(-2), kk.transpose(-1, -2)).squeeze(-2) * scale  # [B, *S, H, Kt]
    mask = None
    for i in range(nd):  # [S_1, .., S_D, K_1, .., K_D]: the product of the per-dim windows
        shape = [1] * (2 * nd)
        shape[i], shape[nd + i] = valid[i].shape
        m = valid[i].reshape(shape)
        mask = m if mask is None else mask & m
    mask = mask.reshape(mask.shape[:nd] + (1, math.prod(int(t.shape[1]) for t in keys)))  # heads broadcast
    scores = scores.masked_fill(~mask, float("-inf"))  # the query's own slot is always valid
    p = torch.softmax(scores, dim=-1)
    return torch.matmul(p.unsqueeze(-2), vv).squeeze(-2).to(q.dtype)


def sharded_neighborhood_attention(q, k, v, kernel: Sequence[int], stride: Sequence[int],
                                   dilation: Sequence[int], causal: Sequence[bool], scale: float,
                                   name: str = "neighborhood_attention") -> torch.Tensor:
    """Neighbourhood attention of ShardTensors q, k, v laid out alike (checked by the caller),
    sharded along any spatial dims, the batch dim and (without GQA) the heads dim.

    Args:
        q, k, v: ShardTensors ``[B, *spatial, heads, head_dim]`` with one layout.
        kernel, stride, dilation, causal: per spatial dim (checked by the caller).
        scale: score scale.
        name: the public function's name, for messages.

    Returns:
        This rank's output rows as a plain tensor ``[B_local, *S_local, Hq, Ev]``.
    """
    nd = q.dim() - 3
    mesh = q.device_mesh
    per_dim = sizes_by_mesh_dim(q.placements, q._shard_sizes)
    sharded = {d: m for m, d in shard_dims_of(q.placements)}
    if q.dim() - 1 in sharded:
        raise NotImplementedError(f"{name}: the head_dim (last dim) is sharded ({q.placements}); every score "
                                  "needs all of it. Shard a spatial, the batch or the heads dim instead")
    if q.dim() - 2 in sharded and q.shape[-2] != k.shape[-2]:
        raise NotImplementedError(f"{name}: the heads dim is sharded with grouped keys ({q.shape[-2]} query heads, "
                                  f"{k.shape[-2]} key heads); shard a spatial or the batch dim instead")
    kl, vl = k.to_local(), v.to_local()
    ql = q.to_local()
    kv = torch.cat([kl, vl], dim=-1)
    keys: List[torch.Tensor] = []
    valid: List[torch.Tensor] = []
    for i in range(nd):
        d, n = 1 + i, int(q.shape[1 + i])
        args = (n, kernel[i], stride[i], dilation[i], causal[i])
        if d not in sharded:
            ky, ok = window_keys(torch.arange(n), *args)
            keys.append(ky.to(ql.device))
            valid.append(ok.to(ql.device))
            continue
        m = sharded[d]
        sizes = list(per_dim[m])
        offs = [sum(sizes[:r]) for r in range(len(sizes))]
        ranges = [[key_range(offs[r], offs[r] + sizes[r], *args)] for r in range(len(sizes))]
        coord = mesh.get_local_rank(m)
        kv = fetch_ranges(kv, sizes, ranges, dim=d, group=mesh.get_group(m))
        ky, ok = window_keys(torch.arange(offs[coord], offs[coord] + sizes[coord]), *args)
        keys.append((ky - ranges[coord][0][0]).to(ql.device))
        valid.append(ok.to(ql.device))
    kx, vx = kv[..., :kl.shape[-1]], kv[..., kl.shape[-1]:]
    return local_neighborhood_attention(ql, kx, vx, keys, valid, scale)


def plain_neighborhood_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: Sequence[int],
                                 stride: Sequence[int], dilation: Sequence[int], causal: Sequence[bool],
                                 scale: float) -> torch.Tensor:
    """Neighbourhood attention of plain tensors ``[B, *spatial, heads, head_dim]`` (arguments
    checked by the caller).

    Args:
        q, k, v: the whole tensors.
        kernel, stride, dilation, causal: per spatial dim.
        scale: score scale.

    Returns:
        ``[B, *spatial, Hq, Ev]``.
    """
    keys, valid = [], []
    for i in range(q.dim() - 3):
        n = int(q.shape[1 + i])
        ky, ok = window_keys(torch.arange(n), n, kernel[i], stride[i], dilation[i], causal[i])
        keys.append(ky.to(q.device))
        valid.append(ok.to(q.device))
    return local_neighborhood_attention(q, k, v, keys, valid, scale)

