"""``F.conv1d/2d/3d`` and ``F.conv_transpose1d/2d/3d`` on a ShardTensor sharded along a spatial
dim (so ``nn.Conv2d`` etc. work unmodified), or along several spatial dims by several mesh dims
(an image split in height and width on a 2-D mesh, ``(Shard(2), Shard(3))``): any kernel, stride,
padding and dilation, uneven and empty shards. Along every sharded dim a rank owns the output
rows whose window starts in its rows (conv) or whose source row ``(o + padding) // stride`` is one
of its rows (transposed conv); it fetches the input rows those outputs read (halo, one sharded
dim at a time, see :mod:`._grid`) and runs the op locally, with the zero padding of the global
edges applied explicitly. Weights are plain (or replicated) tensors; their gradients are per-rank
partial sums, as for ``nn.Linear``. A sharded batch dim runs locally.

A convolution saves only this rank's own rows for backward, as torch's saves its input (which the
layer before usually keeps anyway): the window with the fetched rows and the zero padding is
rebuilt in backward (one more exchange of the halo rows, no convolution recomputed) instead of
being kept alive from forward to backward."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import op_name, register
from meshshard.tensor._ops._grid import (bind, empty_output, fetch, grid_input, param_local, starts_of, tuple_of,
                                         wrap_grid)

__all__ = ["conv_handler", "conv_transpose_handler"]

_CONV = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}
_CONV_T = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}


def _pads(padding, k, dil, nd):
    """(left, right) zero padding of every spatial dim, ``'same'`` / ``'valid'`` resolved as torch does."""
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "same":
        return [(dil[i] * (k[i] - 1) // 2, dil[i] * (k[i] - 1) - dil[i] * (k[i] - 1) // 2) for i in range(nd)]
    return [(p, p) for p in tuple_of(padding, nd, "padding")]


def _flat_pad(pads):
    """``F.pad``'s argument (last dim first) from per-dim (left, right)."""
    return [v for lr in reversed(pads) for v in lr]


class _ConvOnFetchedRows(torch.autograd.Function):
    """``conv(pad(fetch_rows(local)), weight, bias)`` with ``fetch_rows`` the (differentiable,
    collective) fetch of the halo rows and ``pad`` the zero padding at the global edges (``F.pad``'s
    argument); saves ``local`` and the weight, not the window.

    Every rank runs the same collectives in the same order in forward and backward, also a rank
    that owns no output row (``empty``: ``compute_empty(window)`` gives its empty output)."""

    @staticmethod
    def forward(ctx, local, weight, bias, fetch_rows, pad, func, stride, dilation, groups, compute_empty):
        with torch.no_grad():
            window = fetch_rows(local)
            if compute_empty is not None:
                out = compute_empty(window)
            else:
                out = func(F.pad(window, pad), weight, bias, stride, 0, dilation, groups)
        ctx.save_for_backward(local, weight, bias)
        ctx.fetch_rows, ctx.pad, ctx.stride, ctx.dilation, ctx.groups = fetch_rows, pad, stride, dilation, groups
        ctx.empty = compute_empty is not None
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        local, weight, bias = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        with torch.enable_grad():  # the exchange again (collective), then its backward
            src = local.detach().requires_grad_(need_x)
            window = ctx.fetch_rows(src)
            if not ctx.empty:
                window = F.pad(window, ctx.pad)
        if ctx.empty:
            gx = torch.zeros_like(window)
            gw = torch.zeros_like(weight) if need_w else None
            gb = torch.zeros_like(bias) if need_b else None
        else:
            nd = weight.dim() - 2
            args = ([bias.shape[0]] if bias is not None else None, list(ctx.stride), [0] * nd, list(ctx.dilation),
                    False, [0] * nd, ctx.groups)
            grad = grad.contiguous()
            gw = gb = None
            if need_w or need_b:  # the only step that reads the window's values
                _, gw, gb = torch.ops.aten.convolution_backward(grad, window.detach(), weight, *args,
                                                                [False, need_w, need_b])
            gx = None
            if need_x:
                shape = window.shape
                if window.untyped_storage().data_ptr() != local.untyped_storage().data_ptr():
                    # the graph behind ``window`` (pad, exchange) needs its shape only: free its rows now
                    window.untyped_storage().resize_(0)
                gx = torch.ops.aten.convolution_backward(grad, weight.new_empty(()).expand(shape), weight, *args,
                                                         [True, False, False])[0]
        grad_local = torch.autograd.grad(window, src, gx)[0] if need_x else None
        ctx.fetch_rows = None  # its closure holds the input's rows: let them go with the graph's other tensors
        return grad_local, gw, gb, None, None, None, None, None, None, None


def conv_handler(func, types, args, kwargs):
    """``F.conv{1,2,3}d`` with the input sharded along spatial dims (and / or the batch dim)."""
    nd = _CONV[func]
    a = bind(("input", "weight", "bias", "stride", "padding", "dilation", "groups"),
             dict(bias=None, stride=1, padding=0, dilation=1, groups=1), args, kwargs)
    g = grid_input(func, a["input"], nd)
    w, b = param_local(func, a["weight"], g), param_local(func, a["bias"], g)
    k = tuple(w.shape[2:])
    s, dil = tuple_of(a["stride"], nd, "stride"), tuple_of(a["dilation"], nd, "dilation")
    if isinstance(a["padding"], str) and a["padding"] == "same" and any(v != 1 for v in s):
        raise ValueError(f"{op_name(func)}: padding='same' is not supported for strided convolutions")
    if not g.spatial:  # replicated or batch-sharded: every output row depends on local rows only
        return wrap_grid(g, func(g.local, w, b, s, a["padding"], dil, a["groups"]))
    pads = _pads(a["padding"], k, dil, nd)
    local_pads, counts, windows, empty = list(pads), {}, {}, {}
    for ax in g.spatial:
        j = ax.j
        ext = dil[j] * (k[j] - 1)
        n_out = (ax.n + pads[j][0] + pads[j][1] - ext - 1) // s[j] + 1
        if n_out < 1:
            raise ValueError(f"{op_name(func)}: the sharded dim {ax.d} has {ax.n} rows, fewer than the kernel's "
                             f"extent {ext + 1} after padding {pads[j]}")
        counts[ax.d] = ax.owned(torch.arange(n_out) * s[j])  # window start in padded coordinates
        windows[ax.d] = [[(lo * s[j] - pads[j][0], (lo + c - 1) * s[j] - pads[j][0] + ext + 1) if c else (0, 0)]
                         for lo, c in zip(starts_of(counts[ax.d]), counts[ax.d])]
        (a0, b0), = windows[ax.d][ax.coord]
        if counts[ax.d][ax.coord]:
            local_pads[j] = (max(0, -a0), max(0, b0 - ax.n))  # zeros beyond the global edges
        else:
            local_pads[j] = (0, 0)
            empty[ax.d] = ext + 1
    def call(t):
        return func(F.pad(t, _flat_pad(local_pads)), w, b, s, 0, dil, a["groups"])

    if torch.is_autocast_enabled(g.local.device.type):  # the composed ops, cast by autocast
        win = fetch(g, windows)
        out = empty_output(call, win, empty, w, b) if empty else call(win)
        return wrap_grid(g, out, counts)

    def fetch_rows(t):
        return fetch(g, windows, t)

    def compute_empty(window):
        return empty_output(call, window, empty)

    out = _ConvOnFetchedRows.apply(g.local, w, b, fetch_rows, _flat_pad(local_pads), func, s, dil, a["groups"],
                                   compute_empty if empty else None)
    return wrap_grid(g, out, counts)


def conv_transpose_handler(func, types, args, kwargs):
    """``F.conv_transpose{1,2,3}d`` with the input sharded along spatial dims (and / or the batch dim)."""
    nd = _CONV_T[func]
    a = bind(("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation"),
             dict(bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1), args, kwargs)
    g = grid_input(func, a["input"], nd)
    w, b = param_local(func, a["weight"], g), param_local(func, a["bias"], g)
    k = tuple(w.shape[2:])
    s, dil = tuple_of(a["stride"], nd, "stride"), tuple_of(a["dilation"], nd, "dilation")
    p, op = tuple_of(a["padding"], nd, "padding"), tuple_of(a["output_padding"], nd, "output_padding")
    if not g.spatial:
        return wrap_grid(g, func(g.local, w, b, s, p, op, a["groups"], dil))
    counts, windows, first, unreached = {}, {}, {}, False
    p_local, op_local = list(p), list(op)
    for ax in g.spatial:
        j = ax.j
        ext = dil[j] * (k[j] - 1)
        n_out = (ax.n - 1) * s[j] - 2 * p[j] + ext + op[j] + 1
        if n_out < 1:
            raise ValueError(f"{op_name(func)}: empty output along the sharded dim {ax.d}")
        # output o receives input rows i with i*s - p <= o <= i*s - p + ext; its anchor is (o + p) // s
        counts[ax.d] = ax.owned((torch.arange(n_out) + p[j]) // s[j])

        def window(lo, c, j=j, ext=ext, n=ax.n):
            if not c:
                return (0, 0)
            i0 = max(0, -((ext - lo - p[j]) // s[j]))  # ceil((lo + p - ext) / s)
            i1 = min(n - 1, (lo + c - 1 + p[j]) // s[j])
            return (i0, max(i0, i1 + 1))

        windows[ax.d] = [[window(lo, c)] for lo, c in zip(starts_of(counts[ax.d]), counts[ax.d])]
        (i0, i1), = windows[ax.d][ax.coord]
        first[ax.d] = starts_of(counts[ax.d])[ax.coord] + p[j] - i0 * s[j]  # local row of this rank's first output
        unreached = unreached or i1 == i0  # outputs no input row reaches (stride > extent), or none at all
        p_local[j], op_local[j] = 0, 0
    win = fetch(g, windows)

    def call(t):
        return func(t, w, None, s, p_local, op_local, a["groups"], dil)

    if unreached:  # this rank's outputs are all zero (before the bias) along some dim
        out = empty_output(call, win, {ax.d: 1 for ax in g.spatial if win.shape[ax.d] == 0}, w)
        shape = list(out.shape)
        for ax in g.spatial:
            shape[ax.d] = counts[ax.d][ax.coord]
        out = out.new_zeros(shape) + out.sum()  # out is empty: adds 0, keeps the link to win and w
    else:
        out = call(win)
        for ax in g.spatial:  # cut (or zero-extend) every sharded dim to this rank's outputs
            c, f, length = counts[ax.d][ax.coord], first[ax.d], out.shape[ax.d]
            pad = [0, 0] * (out.dim() - 1 - ax.d) + [max(0, -f), max(0, f + c - length)]
            out = F.pad(out, pad).narrow(ax.d, max(0, f), c)
    if b is not None:
        out = out + b.reshape([-1] + [1] * nd)
    return wrap_grid(g, out, counts)


register(conv_handler, tuple(_CONV))
register(conv_transpose_handler, tuple(_CONV_T))
