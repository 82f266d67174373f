"""Losses (``mse_loss``, ``l1_loss``, ``huber_loss``, ``smooth_l1_loss``, ``cross_entropy``,
``nll_loss``, ``binary_cross_entropy(_with_logits)``) on sharded predictions and targets.

``reduction="mean"`` / ``"sum"`` give the GLOBAL loss as a replicated ShardTensor scalar: each rank
sums its own rows' losses, and ONE all-reduce of ``[sum, denominator, failure flags]`` over the
sharding mesh dim finishes it (one per sharding mesh dim when several shard the input, such as an
image split in height and width on a 2 x 2 mesh; class-index losses take one sharding mesh dim).
The denominator is what torch divides by on the whole tensor: the element count (the weights' sum
for weighted ``mse_loss`` / ``l1_loss``), or for class-index ``cross_entropy`` / ``nll_loss`` the
summed class weights of the targets that are not ``ignore_index``. Backward through the
all-reduce is the identity, so each rank's rows get d(global loss)/d(rows) exactly.
``reduction="none"`` is local and keeps the layout (the class dim dropped for class-index targets).

A local error on some ranks (e.g. a class index out of range in one rank's rows) still joins the
all-reduce, as a failure flag, so every rank raises instead of the others hanging.
"""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F
from torch.nn import _reduction

from meshshard.distributed import Replicate, Shard
from meshshard.distributed.autograd import all_reduce_sum
from meshshard.tensor.shard_tensor import ShardTensor, _FromLocal
from meshshard.tensor.spec import shard_dim_of, shard_dims_of
from meshshard.tensor._ops._common import (align_plain, is_replicated, layout, local_of, op_name, reference,
                                           register, wrap)

__all__ = ["loss_handler", "LOSSES"]

_CLASS_LOSSES = (F.cross_entropy, F.nll_loss)
_WEIGHT_SUM_MEAN = (F.mse_loss, F.l1_loss)  # with weight=, torch's mean divides by the weights' sum
LOSSES = (F.mse_loss, F.l1_loss, F.huber_loss, F.smooth_l1_loss, F.binary_cross_entropy,
          F.binary_cross_entropy_with_logits) + _CLASS_LOSSES


def _arguments(func, args, kwargs) -> dict:
    """All arguments by name, the legacy ``size_average`` / ``reduce`` folded into ``reduction``."""
    bound = inspect.signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    a = dict(bound.arguments)
    if func is F.l1_loss and a.get("weight") is None:
        a["weight"] = _l1_weight_dropped_by_torch()
    size_average, reduce = a.pop("size_average", None), a.pop("reduce", None)
    if size_average is not None or reduce is not None:
        a["reduction"] = _reduction.legacy_get_string(size_average, reduce, emit_warning=False)
    if a["reduction"] not in ("none", "mean", "sum"):
        raise ValueError(f"ShardTensor: {op_name(func)}: reduction={a['reduction']!r} is not 'none', 'mean' or 'sum'")
    return a


def _l1_weight_dropped_by_torch():
    """``weight=`` of the ``F.l1_loss`` call being handled: torch's ``l1_loss`` checks ``weight`` for a
    torch-function override but does not forward it to ``handle_torch_function``, so a weighted L1
    loss would silently lose its weights. Read it from that call's frame."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code is not F.l1_loss.__code__:
            frame = frame.f_back
        return None if frame is None else frame.f_locals.get("weight")
    finally:
        del frame


def _aligned(func, t, ref):
    """Local rows of an operand laid out like ``ref`` (element-wise pairing)."""
    if isinstance(t, ShardTensor):
        return local_of(func, t, ref, align=True)
    if isinstance(t, torch.Tensor):
        return align_plain(func, t, ref)
    return t


def _class_weight(func, w, ref):
    """A per-class weight is indexed by class, never split by rows."""
    if isinstance(w, ShardTensor):
        if not is_replicated(w):
            raise ValueError(f"ShardTensor: {op_name(func)}: the class weight must be replicated, got {w.placements}")
        return local_of(func, w, ref)
    return w


def _index_target(func, t, ref, cdim: int):
    """This rank's rows of a class-index target (the input's shape without the class dim)."""
    want = tuple(s for k, s in enumerate(ref.shape) if k != cdim)
    if tuple(t.shape) != want:
        raise ValueError(f"ShardTensor: {op_name(func)}: class-index target of shape {tuple(t.shape)} does not "
                         f"match the input {tuple(ref.shape)} without its class dim {cdim}: expected {want}")
    m, d = shard_dim_of(ref.placements)
    dt = d - 1 if d > cdim else d
    if isinstance(t, ShardTensor) and not is_replicated(t):
        expect = tuple(Shard(dt) if k == m else p for k, p in enumerate(ref.placements))
        if layout(t) != (ref.device_mesh, expect, ref._shard_sizes):
            raise ValueError(
                f"ShardTensor: {op_name(func)}: target layout {t.placements} with shard sizes {t._shard_sizes} "
                f"does not match the input's rows: expected {expect} with shard sizes {ref._shard_sizes}; "
                "redistribute the target first")
        return t.to_local()
    if isinstance(t, ShardTensor):
        t = t.to_local()
    coord = ref.device_mesh.get_local_rank(m)
    return t.narrow(dt, ref.offsets(m), ref._shard_sizes[coord])


def _local_loss(func, a: dict, ref):
    """``(local loss with reduction="sum" or "none", denominator, shard shift)`` on this rank's rows."""
    inp, tgt = a["input"], a["target"]
    reduction = a["reduction"]
    local_red = "none" if reduction == "none" else "sum"
    if func in _CLASS_LOSSES:
        if inp is not ref:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a plain input and a sharded target; "
                                      "make the input (the prediction) a ShardTensor with the target's rows")
        cdim = 1 if inp.dim() >= 2 else 0
        m, d = shard_dim_of(ref.placements)
        if d == cdim:
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with the class dim {cdim} sharded would need "
                                      "every class of a row on one rank; shard a row dim instead")
        rest = {k: v for k, v in a.items() if k not in ("input", "target", "reduction")}
        rest["weight"] = _class_weight(func, a.get("weight"), ref)
        linp = inp.to_local()
        if tgt.is_floating_point():  # class probabilities, laid out like the input
            if tuple(tgt.shape) != tuple(inp.shape):
                raise ValueError(f"ShardTensor: {op_name(func)}: probability target of shape {tuple(tgt.shape)} "
                                 f"vs input {tuple(inp.shape)}")
            ltgt = _aligned(func, tgt, ref)
            out = func(linp, ltgt, reduction=local_red, **rest)
            return out, linp.numel() // max(inp.shape[cdim], 1), 0
        ltgt = _index_target(func, tgt, ref, cdim)
        out = func(linp, ltgt, reduction=local_red, **rest)
        valid = ltgt[ltgt != a["ignore_index"]]
        w = rest["weight"]
        denom = valid.numel() if w is None else w[valid].sum()
        return out, denom, -1 if d > cdim else 0
    if tuple(tgt.shape) != tuple(inp.shape):
        raise ValueError(f"ShardTensor: {op_name(func)}: target shape {tuple(tgt.shape)} differs from the input "
                         f"shape {tuple(inp.shape)} (global shapes; broadcasting a loss target is refused)")
    local = {k: _aligned(func, v, ref) for k, v in a.items() if k != "reduction"}
    out = func(reduction=local_red, **local)
    if func in _WEIGHT_SUM_MEAN and local.get("weight") is not None:
        return out, local["weight"].sum(), 0
    return out, local["input"].numel(), 0


def loss_handler(func, types, args, kwargs):
    """A loss on ShardTensor predictions / targets (see the module docstring for the semantics).

    Args:
        func: the ``torch.nn.functional`` loss.
        types, args, kwargs: as passed to ``__torch_function__``; ``input`` and ``target`` have the
            same global shape (class-index targets: the input's without the class dim) and the
            same rows; plain tensors spanning the sharded dim with the global size contribute
            this rank's rows.

    Returns:
        ``reduction="none"``: a ShardTensor with the input's layout, e.g. ``[N, F]`` sharded like
        the input (``[N]`` for class-index targets). ``"mean"`` / ``"sum"``: a replicated
        ShardTensor scalar holding the global value.
    """
    a = _arguments(func, args, kwargs)
    sts = [t for t in a.values() if isinstance(t, ShardTensor)]
    ref = reference(func, sts)
    sds = shard_dims_of(ref.placements)
    if not sds:  # nothing sharded: every rank computes the whole loss
        local = {k: (v.to_local() if isinstance(v, ShardTensor) else v) for k, v in a.items()}
        return wrap(func, func(**local), ref)
    if a["reduction"] == "none":
        out, _, shift = _local_loss(func, a, ref)
        return wrap(func, out, ref, shift)
    mesh = ref.device_mesh
    mesh_dims = [m for m, _ in sds]  # an image split in height and width: one all-reduce per mesh dim
    sizes = [mesh.size(m) for m in mesh_dims]
    slot = 0
    for m, n in zip(mesh_dims, sizes):
        slot = slot * n + mesh.get_local_rank(m)
    dtype = ref.dtype
    flags = torch.zeros(math.prod(sizes), dtype=dtype, device=ref._local_tensor.device)
    error = None
    try:
        total, denom, _ = _local_loss(func, a, ref)
        denom = torch.as_tensor(denom, dtype=dtype, device=flags.device)
    except Exception as exc:  # noqa: BLE001 - joins the all-reduce as a flag, re-raised below
        error = exc
        total = denom = torch.zeros((), dtype=dtype, device=flags.device)
        flags[slot] = 1
    red = torch.cat([total.reshape(1).to(dtype), denom.reshape(1), flags])
    for m in mesh_dims:
        red = all_reduce_sum(red, group=mesh.get_group(m))
    failed = (red[2:] != 0).nonzero().flatten().tolist()
    if error is not None:
        raise error
    if failed:
        raise RuntimeError(f"ShardTensor: {op_name(func)} failed on rank(s) {failed} of the shard group (their "
                           "own rows); see the error raised there")
    value = red[0] / red[1] if a["reduction"] == "mean" else red[0]
    return _FromLocal.apply(value, mesh, tuple(Replicate() for _ in ref.placements), None)


register(loss_handler, LOSSES)
