"""Pooling on a ShardTensor sharded along a spatial dim, or along several spatial dims by several
mesh dims (an image split in height and width): ``max_pool{1,2,3}d`` (kernel, stride, padding,
dilation, ceil_mode), ``avg_pool{1,2,3}d`` (also count_include_pad and divisor_override),
``adaptive_avg_pool{1,2,3}d`` and ``adaptive_max_pool{1,2,3}d``. Along every sharded dim a rank
owns the output rows whose window starts in its rows and fetches the rows those windows read
(see :mod:`._grid`). With ``return_indices=True`` torch calls ``max_pool*_with_indices``, which
ShardTensor does not support (the indices would be local): it raises NotImplementedError naming it."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import op_name, register
from meshshard.tensor._ops._grid import bind, empty_output, fetch, grid_input, starts_of, tuple_of, wrap_grid

__all__ = ["max_pool_handler", "avg_pool_handler", "adaptive_pool_handler"]

_MAX = {F.max_pool1d: 1, F.max_pool2d: 2, F.max_pool3d: 3}
_AVG = {F.avg_pool1d: 1, F.avg_pool2d: 2, F.avg_pool3d: 3}
_ADAPTIVE = {F.adaptive_avg_pool1d: 1, F.adaptive_avg_pool2d: 2, F.adaptive_avg_pool3d: 3,
             F.adaptive_max_pool1d: 1, F.adaptive_max_pool2d: 2, F.adaptive_max_pool3d: 3}


def _n_out(n, k, s, p, dil, ceil_mode):
    """Output length of a pooling window along one dim (torch's rule, ceil_mode included)."""
    span = n + 2 * p - dil * (k - 1) - 1
    out = (span + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1  # the last window must start inside the input or the left padding
    return out


def _windowed(func, g, k, s, p, dil, ceil_mode, pad_value, call):
    """Shared body of max / avg pooling: owned outputs, fetched and edge-padded windows, local op
    (``call`` runs with zero padding along the sharded dims, which are padded here).

    Returns ``(local output, {dim: every rank's output rows}, {dim: global (start, stop) of this
    rank's outputs})``."""
    counts, windows, owned, rows = {}, {}, {}, {}
    for ax in g.spatial:
        j = ax.j
        ext = dil[j] * (k[j] - 1)
        n_out = _n_out(ax.n, k[j], s[j], p[j], dil[j], ceil_mode)
        if n_out < 1:
            raise ValueError(f"{op_name(func)}: the sharded dim {ax.d} has {ax.n} rows, fewer than the window")
        counts[ax.d] = ax.owned(torch.arange(n_out) * s[j])
        windows[ax.d] = [[(lo * s[j] - p[j], (lo + c - 1) * s[j] - p[j] + ext + 1) if c else (0, 0)]
                         for lo, c in zip(starts_of(counts[ax.d]), counts[ax.d])]
        lo, c = starts_of(counts[ax.d])[ax.coord], counts[ax.d][ax.coord]
        owned[ax.d] = (lo, lo + c)
        rows[ax.d] = ext + 1
    win = fetch(g, windows)
    pad = [0, 0] * win.dim()
    for ax in g.spatial:  # the global edges' padding, explicitly (none along a dim with no outputs here)
        (a0, b0), = windows[ax.d][ax.coord]
        at = 2 * (win.dim() - 1 - ax.d)
        pad[at:at + 2] = [max(0, -a0), max(0, b0 - ax.n)]
    win = F.pad(win, pad, value=pad_value)
    empty = {d: rows[d] for d, (lo, hi) in owned.items() if hi == lo}
    if empty:
        return empty_output(call, win, empty), counts, owned
    return call(win), counts, owned


def _stride(a, k, nd):
    st = a["stride"]
    if st is None or (not isinstance(st, int) and len(st) == 0):
        return k
    return tuple_of(st, nd, "stride")


def max_pool_handler(func, types, args, kwargs):
    """``F.max_pool{1,2,3}d`` with the input sharded along spatial dims (and / or the batch dim)."""
    nd = _MAX[func]
    a = bind(("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
             dict(stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False), args, kwargs)
    g = grid_input(func, a["input"], nd)
    k = tuple_of(a["kernel_size"], nd, "kernel_size")
    s = _stride(a, k, nd)
    p, dil = tuple_of(a["padding"], nd, "padding"), tuple_of(a["dilation"], nd, "dilation")
    if not g.spatial:
        return wrap_grid(g, func(g.local, k, s, p, dil, a["ceil_mode"]))
    sharded = {ax.j for ax in g.spatial}
    p_local = tuple(0 if i in sharded else v for i, v in enumerate(p))
    out, counts, _ = _windowed(func, g, k, s, p, dil, a["ceil_mode"], float("-inf"),
                               lambda t: func(t, k, s, p_local, dil, a["ceil_mode"]))
    return wrap_grid(g, out, counts)


def avg_pool_handler(func, types, args, kwargs):
    """``F.avg_pool{1,2,3}d`` with the input sharded along spatial dims (and / or the batch dim)."""
    nd = _AVG[func]
    names = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
    a = bind(names[: 6 if nd == 1 else 7], dict(stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                                                divisor_override=None), args, kwargs)
    g = grid_input(func, a["input"], nd)
    k = tuple_of(a["kernel_size"], nd, "kernel_size")
    s = _stride(a, k, nd)
    p = tuple_of(a["padding"], nd, "padding")
    extra = () if nd == 1 else (a["divisor_override"],)
    if not g.spatial:
        return wrap_grid(g, func(g.local, k, s, p, a["ceil_mode"], a["count_include_pad"], *extra))
    sharded = {ax.j for ax in g.spatial}
    p_local = tuple(0 if i in sharded else v for i, v in enumerate(p))
    out, counts, owned = _windowed(func, g, k, s, p, (1,) * nd, a["ceil_mode"], 0.0,
                                   lambda t: func(t, k, s, p_local, a["ceil_mode"], a["count_include_pad"], *extra))
    if a["divisor_override"] is None and out.numel():
        # Locally every window along a sharded dim is whole (divisor k there); torch divides by the
        # window clipped to the padded input (count_include_pad) or to the input, a product over dims.
        for ax in g.spatial:
            j, (lo, hi) = ax.j, owned[ax.d]
            start = torch.arange(lo, hi) * s[j] - p[j]
            end = torch.clamp(start + k[j], max=ax.n + p[j])
            if not a["count_include_pad"]:
                start, end = start.clamp(min=0), end.clamp(max=ax.n)
            fix = (k[j] / (end - start).to(torch.float64)).to(device=out.device, dtype=out.dtype)
            out = out * fix.reshape([-1] + [1] * (out.dim() - 1 - ax.d))
    return wrap_grid(g, out, counts)


def _adaptive_bounds(n, m):
    """torch's adaptive windows: output ``o`` of ``m`` reads rows ``[floor(o n / m), ceil((o + 1) n / m))``."""
    o = torch.arange(m)
    return (o * n) // m, ((o + 1) * n + m - 1) // m


def adaptive_pool_handler(func, types, args, kwargs):
    """``F.adaptive_{avg,max}_pool{1,2,3}d`` with the input sharded along spatial dims (and / or the
    batch dim). The windows of the outputs a rank owns are fetched; along a sharded dim whose
    owned windows all have the same length and follow each other, one local call covers them,
    else one call per output row (windows of torch's adaptive pooling overlap or differ in
    length there)."""
    nd = _ADAPTIVE[func]
    a = bind(("input", "output_size", "return_indices"), dict(return_indices=False), args, kwargs)
    g = grid_input(func, a["input"], nd)
    size = a["output_size"]
    size = [size] * nd if isinstance(size, int) or size is None else list(size)
    if len(size) == 1:
        size = size * nd
    is_max = func in (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)
    extra = {"return_indices": False} if is_max else {}
    if not g.spatial:
        return wrap_grid(g, func(g.local, a["output_size"], **extra))
    counts, windows, segments, empty = {}, {}, [], {}
    for ax in g.spatial:
        m = ax.n if size[ax.j] is None else int(size[ax.j])
        if m < 1:
            raise ValueError(f"{op_name(func)}: output_size {m} along the sharded dim {ax.d}")
        lo_o, hi_o = _adaptive_bounds(ax.n, m)
        counts[ax.d] = ax.owned(lo_o)
        first = starts_of(counts[ax.d])
        windows[ax.d] = [[(int(lo_o[lo]), int(hi_o[lo + c - 1])) if c else (0, 0)]
                         for lo, c in zip(first, counts[ax.d])]
        lo, c = first[ax.coord], counts[ax.d][ax.coord]
        if not c:
            empty[ax.d] = 1
            continue
        base = int(lo_o[lo])
        starts, lengths = lo_o[lo:lo + c] - base, hi_o[lo:lo + c] - lo_o[lo:lo + c]
        if bool((lengths == lengths[0]).all()) and bool((starts == torch.arange(c) * lengths[0]).all()):
            segments.append((ax, [(0, int(lengths[0]) * c, c)]))  # local adaptive pooling gives these windows
        else:
            segments.append((ax, [(int(a0), int(n0), 1) for a0, n0 in zip(starts, lengths)]))
    win = fetch(g, windows)

    def call(t, out_size):
        return func(t, out_size, **extra)

    if empty:
        one = list(size)  # empty dims: 1 output on the probe's row; other sharded dims: this rank's outputs
        for ax in g.spatial:
            one[ax.j] = 1 if ax.d in empty else counts[ax.d][ax.coord]
        return wrap_grid(g, empty_output(lambda t: call(t, one), win, empty), counts)

    def assemble(t, todo, out_size):
        if not todo:
            return call(t, out_size)
        (ax, segs), rest = todo[0], todo[1:]
        parts = []
        for a0, n0, c in segs:
            sz = list(out_size)
            sz[ax.j] = c
            parts.append(assemble(t.narrow(ax.d, a0, n0), rest, sz))
        return parts[0] if len(parts) == 1 else torch.cat(parts, ax.d)

    return wrap_grid(g, assemble(win, segments, size), counts)


register(max_pool_handler, tuple(_MAX))
register(avg_pool_handler, tuple(_AVG))
register(adaptive_pool_handler, tuple(_ADAPTIVE))
