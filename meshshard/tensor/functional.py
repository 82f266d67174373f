"""Public functions on ShardTensors (and plain tensors): metrics and neighbourhood attention
(NATTEN's operator, with ``na1d`` / ``na2d`` / ``na3d`` spelled as in ``natten.functional``).

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
from meshshard.tensor._ops._common import reference, wrap
from meshshard.tensor._ops.neighborhood import plain_neighborhood_attention, sharded_neighborhood_attention

__all__ = ["relative_l2_error", "max_abs_error", "neighborhood_attention", "na1d", "na2d", "na3d"]


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


def _per_dim(value, nd: int, what: str, name: str, check) -> tuple:
    """``value`` (one entry or ``nd`` entries) as an ``nd``-tuple, every entry passing ``check``."""
    if isinstance(value, (bool, int)) or (what != "is_causal" and isinstance(value, float)):
        values = (value,) * nd
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise TypeError(f"{name}: {what} must be one value or {nd} values, got {value!r}") from None
        if len(values) != nd:
            raise ValueError(f"{name}: {what} has {len(values)} entries for {nd} spatial dims ({value!r})")
    for x in values:
        if not check(x):
            raise ValueError(f"{name}: invalid {what} {value!r}")
    return values


def neighborhood_attention(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None):
    """Neighbourhood attention exactly as NATTEN computes it (``natten.functional.na1d`` / ``na2d`` /
    ``na3d``, same arguments in the same order), on 1, 2 or 3 spatial dims, for plain tensors or
    ShardTensors.

    Each query attends to a window of ``kernel_size`` keys per spatial dim:

    * near the borders the window is SHIFTED to stay inside the grid (not cut), so every query sees
      exactly ``prod(kernel_size)`` keys;
    * with ``dilation`` ``d``, the coordinates of a dim split into ``d`` interleaved groups
      (``x % d``) and the window is taken inside the query's group (keys ``d`` apart);
    * with ``is_causal`` true for a dim, the keys are the query and the ``kernel_size - 1`` before it
      in its dilation group (fewer near the start; the window ends at the query);
    * with ``stride`` ``s``, the queries of each group of ``s`` consecutive ones (in their dilation
      group) share one window, the centre query's (causal: the last query's).

    Changed: this function used to cut the window at the borders (a different operator, with other
    values near the borders) and took ``(q, k, v, window, scale)`` on ``[*, S_1, .., S_D, E]``; it
    now computes NATTEN's operator on NATTEN's layout, so a model written with natten (a DiT with
    natten layers, say) gives natten's numbers.

    ShardTensors: q, k and v with one layout (placements and shard sizes), sharded along any of the
    spatial dims (one mesh dim per tensor dim, e.g. height and width on a 2 x 2 mesh, uneven), the
    batch dim, or the heads dim (not with grouped key heads); never along ``head_dim``. Each rank
    fetches the key / value rows its queries' windows reach (up to ``(kernel_size - 1) *
    dilation`` rows beyond its shard on each side, from as many neighbours as needed when shards
    are thin), so values and the gradients of q, k and v equal one process's.

    Args:
        query: ``[B, *spatial, heads, head_dim]`` (``spatial``: 1, 2 or 3 dims), as in natten.
        key: ``[B, *spatial, kv_heads, head_dim]`` (``heads`` a multiple of ``kv_heads``: query head
            ``h`` uses key head ``h // (heads // kv_heads)``).
        value: ``[B, *spatial, kv_heads, head_dim_v]``.
        kernel_size: int or one int per spatial dim, ``>= 1`` and ``kernel_size * dilation <=`` the
            dim's length (natten asks ``>= 2``; 1 is accepted here: the query's own row).
        stride: int or one per spatial dim, ``1 <= stride <= kernel_size``.
        dilation: int or one per spatial dim, ``>= 1``.
        is_causal: bool or one per spatial dim.
        scale: score scale (``None``: ``head_dim ** -0.5``).

    Returns:
        ``[B, *spatial, heads, head_dim_v]`` in ``query``'s dtype (computed in float32 for
        lower-precision input), with ``query``'s layout for ShardTensors.
    """
    name = "neighborhood_attention"
    sts = [t for t in (query, key, value) if isinstance(t, ShardTensor)]
    if sts and len(sts) != 3:
        raise ValueError(f"{name}: query, key and value must all be ShardTensors or all plain tensors, got "
                         f"{[type(t).__name__ for t in (query, key, value)]}")
    nd = query.dim() - 3
    if not 1 <= nd <= 3 or key.dim() != query.dim() or value.dim() != query.dim():
        raise ValueError(f"{name}: query, key and value must be [B, *spatial, heads, head_dim] with 1-3 spatial "
                         f"dims (natten's layout), got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if query.shape[:-2] != key.shape[:-2] or key.shape[:-1] != value.shape[:-1] or query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{name}: query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} "
                         "must share [B, *spatial], key and value their heads, query and key their head_dim")
    if key.shape[-2] < 1 or query.shape[-2] % key.shape[-2]:
        raise ValueError(f"{name}: {query.shape[-2]} query heads are not a multiple of {key.shape[-2]} key heads")
    if not (query.dtype == key.dtype == value.dtype) or not query.is_floating_point():
        raise ValueError(f"{name}: query, key and value must share one floating dtype, got "
                         f"{query.dtype}, {key.dtype}, {value.dtype}")
    is_int = lambda x: isinstance(x, int) and not isinstance(x, bool)  # noqa: E731
    kernel = _per_dim(kernel_size, nd, "kernel_size", name, lambda x: is_int(x) and x >= 1)
    strides = _per_dim(stride, nd, "stride", name, lambda x: is_int(x) and x >= 1)
    dilations = _per_dim(dilation, nd, "dilation", name, lambda x: is_int(x) and x >= 1)
    causal = _per_dim(is_causal, nd, "is_causal", name, lambda x: isinstance(x, bool))
    grid = tuple(int(n) for n in query.shape[1:1 + nd])
    if any(kk * d > n for kk, d, n in zip(kernel, dilations, grid)):
        raise ValueError(f"{name}: kernel_size * dilation must not exceed the grid {grid} in any dim, got "
                         f"kernel_size {kernel}, dilation {dilations}")
    if any(s > kk for s, kk in zip(strides, kernel)):
        raise ValueError(f"{name}: stride {strides} larger than kernel_size {kernel}")
    scale = query.shape[-1] ** -0.5 if scale is None else float(scale)
    args = (kernel, strides, dilations, causal, scale)
    if not sts:
        return plain_neighborhood_attention(query, key, value, *args)
    if key.placements != query.placements or value.placements != query.placements \
            or key._shard_sizes != query._shard_sizes or value._shard_sizes != query._shard_sizes \
            or key.device_mesh != query.device_mesh or value.device_mesh != query.device_mesh:
        raise ValueError(f"{name}: query, key and value must be ShardTensors with one layout (mesh, placements "
                         f"and shard sizes), got {[t.placements for t in sts]} with sizes "
                         f"{[t._shard_sizes for t in sts]}; redistribute them alike")
    ref = reference(neighborhood_attention, [query])
    return wrap(neighborhood_attention, sharded_neighborhood_attention(query, key, value, *args, name=name), ref)


def _na(nd: int):
    def na(query, key, value, kernel_size, stride=1, dilation=1, is_causal=False, scale=None):
        if query.dim() != nd + 3:
            raise ValueError(f"na{nd}d: expects [B, {', '.join('XYZ'[:nd])}, heads, head_dim] ({nd + 3}-d) tensors, "
                             f"got shape {tuple(query.shape)}")
        return neighborhood_attention(query, key, value, kernel_size, stride=stride, dilation=dilation,
                                      is_causal=is_causal, scale=scale)

    na.__name__ = na.__qualname__ = f"na{nd}d"
    na.__doc__ = (f"""{nd}-D neighbourhood attention with the signature and layout of ``natten.functional.na{nd}d``
    (``[B, {', '.join('XYZ'[:nd])}, heads, head_dim]``); see :func:`neighborhood_attention`.

    Args:
        query, key, value: ``{nd + 3}``-d tensors or ShardTensors.
        kernel_size, stride, dilation, is_causal, scale: as in :func:`neighborhood_attention`.

    Returns:
        ``[B, {', '.join('XYZ'[:nd])}, heads, head_dim_v]``.
    """)
    return na


na1d, na2d, na3d = _na(1), _na(2), _na(3)
