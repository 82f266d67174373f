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
differentiable, so the gradients of q, k and v equal one process's. The local computation visits
the window slots one at a time (online softmax, scores recomputed in backward), so it keeps no
gathered copy of the windows.
"""
from __future__ import annotations

import itertools
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


def _take(t: torch.Tensor, keys, slot) -> torch.Tensor:
    """``t``'s rows at window slot ``slot`` of every query: ``[B, S_1, .., S_D, ...]``."""
    for i, j in enumerate(slot):
        t = t.index_select(1 + i, keys[i][:, j])
    return t


def _put(into: torch.Tensor, keys, slot, g: torch.Tensor) -> None:
    """Adjoint of :func:`_take`: add ``g`` (laid out per query) into ``into``'s rows (in place)."""
    for i, j in enumerate(slot):
        shape = list(g.shape)
        shape[1 + i] = into.shape[1 + i]
        g = g.new_zeros(shape).index_add_(1 + i, keys[i][:, j], g)
    into.add_(g)


def _slot_mask(valid, slot):
    """``[1, S_1, .., S_D, 1]`` bool: the queries for which window slot ``slot`` is in the window
    (``None``: all of them)."""
    nd = len(valid)
    mask = None
    for i, j in enumerate(slot):
        col = valid[i][:, j]
        if bool(col.all()):
            continue
        m = col.reshape([1] + [-1 if a == i else 1 for a in range(nd)] + [1])
        mask = m if mask is None else mask & m
    return mask


class _WindowAttention(torch.autograd.Function):
    """Softmax attention over window slots, one slot at a time: forward keeps a running maximum,
    sum and output (online softmax); backward recomputes each slot's scores from the saved
    log-sum-exp. Saved memory: q, k, v, the output and the log-sum-exp, never the gathered windows."""

    @staticmethod
    def forward(ctx, q, k, v, keys, valid, scale):
        acc = _acc_dtype(q.dtype)
        qa, ka, va = q.to(acc), k.to(acc), v.to(acc)
        m = torch.full(q.shape[:-1], float("-inf"), dtype=acc, device=q.device)
        l = torch.zeros_like(m)
        o = torch.zeros(q.shape[:-1] + (v.shape[-1],), dtype=acc, device=q.device)
        for slot in itertools.product(*[range(t.shape[1]) for t in keys]):
            s = (qa * _take(ka, keys, slot)).sum(-1) * scale
            mask = _slot_mask(valid, slot)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            m_new = torch.maximum(m, s)
            safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
            p, corr = torch.exp(s - safe), torch.exp(m - safe)
            l = l * corr + p
            o = o * corr[..., None] + p[..., None] * _take(va, keys, slot)
            m = m_new
        out = o / l[..., None]  # the query's own slot is always in its window: l > 0
        ctx.save_for_backward(q, k, v, out, m + torch.log(l))
        ctx.keys, ctx.valid, ctx.scale = keys, valid, scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, out, lse = ctx.saved_tensors
        keys, valid, scale = ctx.keys, ctx.valid, ctx.scale
        acc = out.dtype
        qa, ka, va, do = q.to(acc), k.to(acc), v.to(acc), d_out.to(acc)
        delta = (do * out).sum(-1)
        dq, dk, dv = torch.zeros_like(qa), torch.zeros_like(ka), torch.zeros_like(va)
        for slot in itertools.product(*[range(t.shape[1]) for t in keys]):
            kk, vv = _take(ka, keys, slot), _take(va, keys, slot)
            s = (qa * kk).sum(-1) * scale
            mask = _slot_mask(valid, slot)
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            p = torch.exp(s - lse)
            ds = p * ((do * vv).sum(-1) - delta) * scale
            dq += ds[..., None] * kk
            _put(dk, keys, slot, ds[..., None] * qa)
            _put(dv, keys, slot, p[..., None] * do)
        return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), None, None, None


def local_neighborhood_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 keys: Sequence[torch.Tensor], valid: Sequence[torch.Tensor],
                                 scale: float) -> torch.Tensor:
    """Attention of every query to its window's keys, given per-dim key indices (differentiable).

    The window slots are visited one at a time (online softmax; backward recomputes the scores),
    so memory stays that of q, k, v and the output whatever the kernel size.

    Args:
        q: ``[B, S_1, .., S_D, Hq, E]`` queries.
        k: ``[B, T_1, .., T_D, Hk, E]`` keys (``Hq`` a multiple of ``Hk``; query head ``h`` uses key
            head ``h // (Hq // Hk)``).
        v: ``[B, T_1, .., T_D, Hk, Ev]`` values.
        keys: per spatial dim ``i``, ``[S_i, K_i]`` int64 indices into ``k``'s dim ``1 + i``.
        valid: per spatial dim, ``[S_i, K_i]`` bool: the slots that are in the window (the query's
            own coordinate always is).
        scale: score scale.

    Returns:
        ``[B, S_1, .., S_D, Hq, Ev]`` in ``q``'s dtype (computed in float64 for float64 input and in
        float32 otherwise).
    """
    if k.shape[-2] != q.shape[-2]:
        rep = q.shape[-2] // k.shape[-2]
        k, v = k.repeat_interleave(rep, dim=-2), v.repeat_interleave(rep, dim=-2)
    return _WindowAttention.apply(q, k, v, tuple(keys), tuple(valid), float(scale))


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

