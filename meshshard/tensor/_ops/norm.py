"""Normalisation with the statistics of the whole tensor: ``batch_norm``, ``group_norm``,
``instance_norm``, and ``layer_norm`` over the sharded dim.

Statistics over dims that include the sharded one are merged exactly from per-rank moments: each
rank computes its (count, mean, sum of squared deviations) two-pass and one small all-gather
hands every rank all of them, which are combined with Chan's parallel formula (as accurate as a
two-pass over the whole tensor, one collective). The all-gather is differentiable (its backward
sums over ranks), so autograd gives exact gradients of input, weight and bias. Statistics over
dims that are not sharded stay local. A tensor sharded along several dims by several mesh dims
(an image split in height and width) merges the moments over one mesh dim after the other (one
all-gather per sharded mesh dim the statistics cover). Gradients of plain ``weight`` / ``bias`` tensors are this
rank's partial sums (DDP convention: all-reduce them, as for ``nn.Linear``).

``batch_norm`` in training runs as one autograd function that saves only its input and the
per-channel statistics, as torch's own kernel does (the composed ops would save about three
tensors of the input's size per layer); its backward sums the two per-channel reductions of the
input gradient over the ranks with one all-reduce per sharded mesh dim.
"""
from __future__ import annotations

import inspect
import math

import torch
import torch.nn.functional as F

from meshshard.distributed import all_reduce
from meshshard.distributed.autograd import all_gather_v
from meshshard.tensor.shard_tensor import ShardTensor
from meshshard.tensor.spec import shard_dims_of
from meshshard.tensor._ops._common import WAY_OUT, op_name, reference, register, wrap
from meshshard.tensor._ops.rowwise import rowwise_handler

__all__ = ["batch_norm_handler", "group_norm_handler", "instance_norm_handler", "layer_norm_handler"]

_SIGNATURES: dict = {}


def _bind(func, args, kwargs):
    sig = _SIGNATURES.get(func)
    if sig is None:
        sig = _SIGNATURES[func] = inspect.signature(func)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _input(func, a, params):
    """The ShardTensor input; the other tensors (running stats, weight, bias) must be plain."""
    x = a["input"]
    if not isinstance(x, ShardTensor):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor as a parameter; only the "
                                  "input may be a ShardTensor")
    for p in params:
        if isinstance(a.get(p), ShardTensor):
            raise NotImplementedError(f"ShardTensor: {op_name(func)} with a ShardTensor {p}; pass a plain tensor")
    ref = reference(func, [x])
    return x, ref, shard_dims_of(ref.placements)


def _acc(x):
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _moments(xa, dims, groups):
    """Mean and sum of squared deviations over ``dims`` (kept), over every rank's rows of the mesh
    dims ``groups`` (``[(group, world), ...]``: Chan's merge of per-rank two-pass moments, one
    mesh dim after the other; differentiable)."""
    n_loc = math.prod(xa.shape[d] for d in dims)
    mean = xa.sum(dims, keepdim=True) / max(n_loc, 1)
    m2 = ((xa - mean) ** 2).sum(dims, keepdim=True)
    n = torch.full_like(mean, n_loc)
    for group, world in groups:
        if world == 1:
            continue
        row = torch.stack([n, mean, m2]).unsqueeze(0)
        g = all_gather_v(row, [1] * world, dim=0, group=group)
        n_r, mean_r, m2_r = g[:, 0], g[:, 1], g[:, 2]
        n = n_r.sum(0)
        mean_g = (n_r * mean_r).sum(0) / n.clamp_min(1)
        mean, m2 = mean_g, (m2_r + n_r * (mean_r - mean_g) ** 2).sum(0)
    return mean, m2


def _normalize(x, sds, local, dims, global_dims_shape, eps, shift=0):
    """``(local - mean) / sqrt(var + eps)`` over ``dims`` of ``local`` (a view of x's local tensor
    in which x's dims from 2 on sit ``shift`` further); statistics over every rank of each mesh
    dim in ``sds`` that shards one of ``dims``. Returns (normalized, mean, m2, count) in the
    accumulation dtype."""
    mesh = x.device_mesh
    groups = [(mesh.get_group(m), mesh.size(m)) for m, d in sds if (d + shift if d >= 2 else d) in dims]
    xa = _acc(local)
    mean, m2 = _moments(xa, dims, groups)
    count = math.prod(global_dims_shape[d] for d in dims)
    var = m2 / max(count, 1)
    return (xa - mean) * torch.rsqrt(var + eps), mean, m2, count


def _affine(y, weight, bias, shape):
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def _update_running(running, new, momentum):
    with torch.no_grad():
        running.mul_(1 - momentum).add_(new.to(running.dtype), alpha=momentum)


def _refuse_channels(func, sds):
    if any(d == 1 for _, d in sds):
        raise NotImplementedError(f"ShardTensor: {op_name(func)} with the channel dim 1 sharded (weights and "
                                  f"running statistics are per channel); shard the batch or a spatial dim; {WAY_OUT}")


class _GlobalBatchNorm(torch.autograd.Function):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per channel with statistics over every rank's
    rows (``groups``); saves ``x`` and the per-channel mean and 1/std only."""

    @staticmethod
    def forward(ctx, x, weight, bias, dims, groups, count, eps):
        xa = _acc(x)
        with torch.no_grad():
            mean, m2 = _moments(xa, dims, groups)
            invstd = torch.rsqrt(m2 / max(count, 1) + eps)
            shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
            y = _affine((xa - mean) * invstd, weight, bias, shape).to(x.dtype)
        ctx.save_for_backward(x, weight, mean, invstd)
        ctx.dims, ctx.groups, ctx.count, ctx.shape = dims, groups, count, shape
        ctx.has_bias, ctx.bias_dtype = bias is not None, getattr(bias, "dtype", None)
        ctx.mark_non_differentiable(mean, m2)
        return y, mean, m2

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad, _grad_mean, _grad_m2):
        # dx = invstd * w * (g - sum(g) / n - xhat * sum(g * xhat) / n), the sums over every rank;
        # written in place so that backward holds about two tensors of the input's size
        x, weight, mean, invstd = ctx.saved_tensors
        dims, shape, n = ctx.dims, ctx.shape, max(ctx.count, 1)
        ga = _acc(grad)
        xhat = _acc(x) - mean
        xhat.mul_(invstd)
        sums = torch.stack([ga.sum(dims, keepdim=True), (ga * xhat).sum(dims, keepdim=True)])
        local = sums.clone()  # this rank's shares: the gradients of weight and bias
        for group, world in ctx.groups:
            if world > 1:
                all_reduce(sums, group=group)
        grad_x = None
        if ctx.needs_input_grad[0]:
            scale = invstd * weight.reshape(shape).to(invstd.dtype) if weight is not None else invstd
            grad_x = xhat.mul_(-sums[1] / n).add_(ga).sub_(sums[0] / n).mul_(scale).to(x.dtype)
        grad_w = local[1].reshape(-1).to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        grad_b = local[0].reshape(-1).to(ctx.bias_dtype) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None, None, None


def batch_norm_handler(func, types, args, kwargs):
    """``F.batch_norm`` on ``[N, C, *]`` sharded on N or a spatial dim. Training (or no running
    stats): mean / variance per channel over all rows of all ranks; running stats are updated
    from the global statistics (unbiased variance, as torch) identically on every rank. Eval:
    local, with the running stats."""
    a = _bind(func, args, kwargs)
    x, ref, sds = _input(func, a, ("running_mean", "running_var", "weight", "bias"))
    _refuse_channels(func, sds)
    rm, rv, training = a["running_mean"], a["running_var"], a["training"]
    if not training:
        out = func(x.to_local(), rm, rv, a["weight"], a["bias"], False, a["momentum"], a["eps"])
        return wrap(func, out, ref)
    if x.dim() < 2:
        raise ValueError(f"ShardTensor: {op_name(func)} expects [N, C, *], got shape {tuple(x.shape)}")
    dims = [0] + list(range(2, x.dim()))
    if math.prod(x.shape[d] for d in dims) <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {tuple(x.shape)}")
    local = x.to_local()
    mesh = x.device_mesh
    groups = [(mesh.get_group(m), mesh.size(m)) for m, d in sds if d in dims]
    count = math.prod(x.shape[d] for d in dims)
    y, mean, m2 = _GlobalBatchNorm.apply(local, a["weight"], a["bias"], dims, groups, count, a["eps"])
    if rm is not None:
        _update_running(rm, mean.detach().flatten(), a["momentum"])
    if rv is not None:
        _update_running(rv, (m2.detach() / (count - 1)).flatten(), a["momentum"])
    return wrap(func, y, ref)


def instance_norm_handler(func, types, args, kwargs):
    """``F.instance_norm`` on ``[N, C, *]`` sharded on N (local statistics) or on a spatial dim
    (statistics per sample and channel over all ranks). Running stats, when tracked, are updated
    with the batch average of the per-instance statistics, identically on every rank."""
    a = _bind(func, args, kwargs)
    x, ref, sds = _input(func, a, ("running_mean", "running_var", "weight", "bias"))
    _refuse_channels(func, sds)
    rm, rv = a["running_mean"], a["running_var"]
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    if not a["use_input_stats"]:  # written out: torch's instance_norm fails on a zero-row shard
        local = x.to_local()
        y = (_acc(local) - rm.reshape(shape)) * torch.rsqrt(rv.reshape(shape) + a["eps"])
        return wrap(func, _affine(y, a["weight"], a["bias"], shape).to(local.dtype), ref)
    dims = list(range(2, x.dim()))
    if not dims or math.prod(x.shape[d] for d in dims) <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size {tuple(x.shape)}")
    local = x.to_local()
    y, mean, m2, count = _normalize(x, sds, local, dims, x.shape, a["eps"])
    if rm is not None or rv is not None:
        # torch averages the per-instance updates over the batch; the batch may be sharded
        with torch.no_grad():
            sums = torch.stack([mean.flatten(2).sum((0, 2)), (m2 / (count - 1)).flatten(2).sum((0, 2))])
            for m, d in sds:  # per-instance statistics are whole here; a sharded batch is summed
                if d == 0:
                    all_reduce(sums, group=x.device_mesh.get_group(m))
            sums = sums / x.shape[0]
        if rm is not None:
            _update_running(rm, sums[0], a["momentum"])
        if rv is not None:
            _update_running(rv, sums[1], a["momentum"])
    return wrap(func, _affine(y, a["weight"], a["bias"], shape).to(local.dtype), ref)


def group_norm_handler(func, types, args, kwargs):
    """``F.group_norm`` on ``[N, C, *]`` sharded on N (local) or on a spatial dim (statistics per
    sample and group over all ranks)."""
    a = _bind(func, args, kwargs)
    x, ref, sds = _input(func, a, ("weight", "bias"))
    _refuse_channels(func, sds)
    g = int(a["num_groups"])
    if x.dim() < 2 or x.shape[1] % g:
        raise ValueError(f"ShardTensor: {op_name(func)}: {x.shape[1] if x.dim() > 1 else None} channels are not "
                         f"divisible by num_groups={g}")
    local = x.to_local()
    # [N, G, C/G, *]: the sharded dim d >= 2 becomes d + 1
    grouped = local.reshape(local.shape[0], g, local.shape[1] // g, *local.shape[2:])
    gshape = (x.shape[0], g, x.shape[1] // g) + tuple(x.shape[2:])
    dims = list(range(2, grouped.dim()))
    y, _, _, _ = _normalize(x, sds, grouped, dims, gshape, a["eps"], shift=1)
    y = y.reshape(local.shape)
    shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
    return wrap(func, _affine(y, a["weight"], a["bias"], shape).to(local.dtype), ref)


def layer_norm_handler(func, types, args, kwargs):
    """``F.layer_norm``: over feature dims only, local (row-wise); when the normalized dims include
    the sharded dim, statistics over all ranks, and each rank uses its slice of weight / bias."""
    a = _bind(func, args, kwargs)
    x, ref, sds = _input(func, a, ("weight", "bias"))
    ns = a["normalized_shape"]
    ns = [ns] if isinstance(ns, int) else list(ns)
    dims = list(range(x.dim() - len(ns), x.dim()))
    if not any(d in dims for _, d in sds):
        return rowwise_handler(func, types, args, kwargs)
    local = x.to_local()
    y, _, _, _ = _normalize(x, sds, local, dims, x.shape, a["eps"])
    w, b = a["weight"], a["bias"]
    for m, d in sds:  # each rank's slice of weight / bias along every sharded normalized dim
        if d in dims:
            start, n = x.offsets(m), local.shape[d]
            w = None if w is None else w.narrow(d - dims[0], start, n)
            b = None if b is None else b.narrow(d - dims[0], start, n)
    return wrap(func, _affine(y, w, b, local.shape[dims[0]:]).to(local.dtype), ref)


register(batch_norm_handler, (F.batch_norm,))
register(instance_norm_handler, (F.instance_norm,))
register(group_norm_handler, (F.group_norm,))
register(layer_norm_handler, (F.layer_norm,))
