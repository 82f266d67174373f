"""Public functions on ShardTensors (and plain tensors): metrics and neighbourhood attention.

Each takes ShardTensors laid out alike (or plain tensors) and gives the whole-tensor result,
as one process would; the collectives they need run inside. Losses are ``torch.nn.functional``'s
own (``F.mse_loss(pred, target)`` on ShardTensors is the global loss; see
:mod:`meshshard.tensor._ops.loss`).
"""
from __future__ import annotations

import torch

from meshshard.distributed import ReduceOp, Replicate, all_reduce
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of
from meshshard.tensor._ops._common import WAY_OUT, reference, wrap
from meshshard.tensor._ops.attention import _halo, _window_attention

__all__ = ["relative_l2_error", "max_abs_error", "neighborhood_attention"]


def relative_l2_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``||pred - target||_2 / ||target||_2`` over every element of the WHOLE tensors (differentiable).

    Args:
        pred, target: ShardTensors of the same layout (or plain tensors, or one of each, paired
            by the rules of element-wise ops), any shape, e.g. ``[N, C]`` sharded over rows.

    Returns:
        A scalar: a replicated ShardTensor for sharded input (``.item()`` is the same float on
        every rank), a plain tensor otherwise.
    """
    diff = pred - target
    return (diff * diff).sum().sqrt() / (target * target).sum().sqrt()


def max_abs_error(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``max |pred - target|`` over every element of the WHOLE tensors (a metric: no gradient).

    Each rank takes the maximum of its own rows (0 for a rank without rows), then one all-reduce
    MAX over the sharding mesh dim.

    Args:
        pred, target: as in :func:`relative_l2_error`.

    Returns:
        A scalar: a replicated ShardTensor for sharded input, a plain tensor otherwise.
    """
    with torch.no_grad():
        diff = (pred - target).abs()
        if not isinstance(diff, ShardTensor):
            return diff.max()
        sd = shard_dim_of(diff.placements)
        local = diff.to_local()
        peak = local.max() if local.numel() else torch.zeros((), dtype=local.dtype, device=local.device)
        if sd is not None:
            all_reduce(peak, op=ReduceOp.MAX, group=diff.device_mesh.get_group(sd[0]))
        return _FromLocal.apply(peak, diff.device_mesh, tuple(Replicate() for _ in diff.placements), None)


def neighborhood_attention(q, k, v, window, scale=None):
    """Neighbourhood (windowed) attention on a 1-D, 2-D or 3-D grid: the query at grid point p
    attends to the keys at the points p + o with ``|o_i| <= window[i] // 2`` that lie on the grid
    (near the boundary the window is cut, not shifted). q, k, v may be plain tensors or
    ShardTensors with one layout, sharded along one spatial dim: each rank fetches a halo of
    ``window // 2`` rows from its neighbours (one indexed all-to-all; shards thinner than the halo
    are crossed), so results and gradients equal one process.

    Args:
        q: ``[*, S_1, .., S_D, E]`` (``*``: batch / head dims, unsharded).
        k: ``[*, S_1, .., S_D, E]``.
        v: ``[*, S_1, .., S_D, Ev]``.
        window: odd int or D odd ints (``D`` = 1, 2 or 3 spatial dims, the dims before the last).
        scale: score scale (``None``: ``1 / sqrt(E)``).

    Returns:
        ``[*, S_1, .., S_D, Ev]``, with q's layout.
    """
    window = (window,) if isinstance(window, int) else tuple(int(w) for w in window)
    if not 1 <= len(window) <= 3 or any(w < 1 or w % 2 == 0 for w in window):
        raise ValueError(f"neighborhood_attention: window must be 1-3 odd sizes, got {window}")
    nd = len(window)
    if q.dim() < nd + 1 or q.shape[:-1] != k.shape[:-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"neighborhood_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         f"must share [*, S_1, .., S_{nd}] for a {nd}-D window")
    halfs = [w // 2 for w in window]
    grid = list(q.shape[q.dim() - 1 - nd:-1])
    scale = 1.0 / (q.shape[-1] ** 0.5) if scale is None else float(scale)
    sts = [t for t in (q, k, v) if isinstance(t, ShardTensor)]
    if not sts:
        return _window_attention(q, k, v, halfs, grid, 0, 0, None, scale)
    if len(sts) != 3 or k.placements != q.placements or v.placements != q.placements \
            or k._shard_sizes != q._shard_sizes or v._shard_sizes != q._shard_sizes:
        raise ValueError("neighborhood_attention: q, k and v must be ShardTensors with one layout "
                         f"(placements and shard sizes), got {[getattr(t, 'placements', 'plain') for t in (q, k, v)]}")
    func = neighborhood_attention
    ref = reference(func, [q])
    sd = shard_dim_of(ref.placements)
    ql, kl, vl = (t.to_local() for t in (q, k, v))
    if sd is None:
        return wrap(func, _window_attention(ql, kl, vl, halfs, grid, 0, 0, None, scale), ref)
    if not q.dim() - 1 - nd <= sd[1] < q.dim() - 1:
        raise NotImplementedError(f"neighborhood_attention: sharded dim {sd[1]} is not a spatial dim of a "
                                  f"{nd}-D window on shape {tuple(q.shape)}; {WAY_OUT}")
    m, d = sd
    coord, group = q.device_mesh.get_local_rank(m), q.device_mesh.get_group(m)
    h = halfs[d - (q.dim() - 1 - nd)]
    kx, start = _halo(kl, d, list(q._shard_sizes), coord, h, group)
    vx, _ = _halo(vl, d, list(q._shard_sizes), coord, h, group)
    out = _window_attention(ql, kx, vx, halfs, grid, q.offsets(m), start, d, scale)
    return wrap(func, out, ref)
