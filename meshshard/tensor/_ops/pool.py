"""Pooling on a ShardTensor sharded along a spatial dim: ``max_pool{1,2,3}d`` (kernel, stride,
padding, dilation, ceil_mode), ``avg_pool{1,2,3}d`` (also count_include_pad and
divisor_override), ``adaptive_avg_pool{1,2,3}d`` and ``adaptive_max_pool{1,2,3}d``. A rank owns
the output rows whose window starts in its rows and fetches the rows those windows read.
With ``return_indices=True`` torch calls ``max_pool*_with_indices``, which ShardTensor does not
support (the indices would be local): it raises NotImplementedError naming it."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import op_name, register
from meshshard.tensor._ops._grid import bind, empty_output, fetch, grid_input, owned_outputs, tuple_of, wrap_grid

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
    """Shared body of max / avg pooling: owned outputs, fetched and edge-padded windows, local op.

    Returns ``(local output, every rank's output rows, global (start, stop) of this rank's outputs)``."""
    j = g.j
    ext = dil[j] * (k[j] - 1)
    n_out = _n_out(g.n, k[j], s[j], p[j], dil[j], ceil_mode)
    if n_out < 1:
        raise ValueError(f"{op_name(func)}: the sharded dim {g.dim} has {g.n} rows, fewer than the window")
    counts = owned_outputs(g, torch.arange(n_out) * s[j])
    starts = [sum(counts[:r]) for r in range(len(counts))]
    windows = [[(lo * s[j] - p[j], (lo + c - 1) * s[j] - p[j] + ext + 1) if c else (0, 0)]
               for lo, c in zip(starts, counts)]
    win = fetch(g, windows)
    lo, c = starts[g.coord], counts[g.coord]
    if not c:
        return empty_output(g, call, win, ext + 1), counts, (lo, lo)
    (a0, b0), = windows[g.coord]
    nd = g.nd
    pad = [0, 0] * (nd - 1 - j) + [max(0, -a0), max(0, b0 - g.n)]
    return call(F.pad(win, pad, value=pad_value)), counts, (lo, lo + c)


def max_pool_handler(func, types, args, kwargs):
    """``F.max_pool{1,2,3}d`` with the input sharded along a spatial (or the batch) dim."""
    nd = _MAX[func]
    a = bind(("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
             dict(stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False), args, kwargs)
    g = grid_input(func, a["input"], nd)
    k = tuple_of(a["kernel_size"], nd, "kernel_size")
    s = k if a["stride"] is None or (not isinstance(a["stride"], int) and len(a["stride"]) == 0) \
        else tuple_of(a["stride"], nd, "stride")
    p, dil = tuple_of(a["padding"], nd, "padding"), tuple_of(a["dilation"], nd, "dilation")
    if g.j is None:
        return wrap_grid(g, func(g.local, k, s, p, dil, a["ceil_mode"]), None)
    p_local = tuple(0 if i == g.j else v for i, v in enumerate(p))
    out, counts, _ = _windowed(func, g, k, s, p, dil, a["ceil_mode"], float("-inf"),
                               lambda t: func(t, k, s, p_local, dil, a["ceil_mode"]))
    return wrap_grid(g, out, counts)


def avg_pool_handler(func, types, args, kwargs):
    """``F.avg_pool{1,2,3}d`` with the input sharded along a spatial (or the batch) dim."""
    nd = _AVG[func]
    names = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")
    a = bind(names[: 6 if nd == 1 else 7], dict(stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                                                divisor_override=None), args, kwargs)
    g = grid_input(func, a["input"], nd)
    k = tuple_of(a["kernel_size"], nd, "kernel_size")
    s = k if a["stride"] is None or (not isinstance(a["stride"], int) and len(a["stride"]) == 0) \
        else tuple_of(a["stride"], nd, "stride")
    p = tuple_of(a["padding"], nd, "padding")
    extra = () if nd == 1 else (a["divisor_override"],)
    if g.j is None:
        return wrap_grid(g, func(g.local, k, s, p, a["ceil_mode"], a["count_include_pad"], *extra), None)
    j = g.j
    p_local = tuple(0 if i == j else v for i, v in enumerate(p))
    out, counts, (lo, hi) = _windowed(func, g, k, s, p, (1,) * nd, a["ceil_mode"], 0.0,
                                      lambda t: func(t, k, s, p_local, a["ceil_mode"], a["count_include_pad"], *extra))
    if a["divisor_override"] is None and hi > lo:
        # Locally every window along the sharded dim is whole (divisor k); torch divides by the
        # window clipped to the padded input (count_include_pad) or to the input, per dim.
        start = torch.arange(lo, hi) * s[j] - p[j]
        end = torch.clamp(start + k[j], max=g.n + p[j])
        if not a["count_include_pad"]:
            start, end = start.clamp(min=0), end.clamp(max=g.n)
        fix = (k[j] / (end - start).to(torch.float64)).to(device=out.device, dtype=out.dtype)
        out = out * fix.reshape([-1] + [1] * (nd - 1 - j))
    return wrap_grid(g, out, counts)


def _adaptive_bounds(n, m):
    """torch's adaptive windows: output ``o`` of ``m`` reads rows ``[floor(o n / m), ceil((o + 1) n / m))``."""
    o = torch.arange(m)
    return (o * n) // m, ((o + 1) * n + m - 1) // m


def adaptive_pool_handler(func, types, args, kwargs):
    """``F.adaptive_{avg,max}_pool{1,2,3}d`` with the input sharded along a spatial (or the batch) dim."""
    nd = _ADAPTIVE[func]
    a = bind(("input", "output_size", "return_indices"), dict(return_indices=False), args, kwargs)
    g = grid_input(func, a["input"], nd)
    size = a["output_size"]
    size = [size] * nd if isinstance(size, int) or size is None else list(size)
    if len(size) == 1:
        size = size * nd
    extra = {"return_indices": False} if func in (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d) else {}
    if g.j is None:
        return wrap_grid(g, func(g.local, a["output_size"], **extra), None)
    j = g.j
    m = g.n if size[j] is None else int(size[j])
    if m < 1:
        raise ValueError(f"{op_name(func)}: output_size {m} along the sharded dim {g.dim}")
    starts_o, ends_o = _adaptive_bounds(g.n, m)
    counts = owned_outputs(g, starts_o)
    first = [sum(counts[:r]) for r in range(len(counts))]
    windows = [[(int(starts_o[lo]), int(ends_o[lo + c - 1])) if c else (0, 0)] for lo, c in zip(first, counts)]
    win = fetch(g, windows)
    lo, c = first[g.coord], counts[g.coord]
    one = list(size)
    one[j] = 1

    def call(t):
        return func(t, one, **extra)

    if not c:
        return wrap_grid(g, empty_output(g, call, win, 1), counts)
    base = windows[g.coord][0][0]
    # windows differ in length along the sharded dim: one local call per output row
    out = torch.cat([call(win.narrow(g.dim, int(starts_o[o]) - base, int(ends_o[o] - starts_o[o])))
                     for o in range(lo, lo + c)], g.dim)
    return wrap_grid(g, out, counts)


register(max_pool_handler, tuple(_MAX))
register(avg_pool_handler, tuple(_AVG))
register(adaptive_pool_handler, tuple(_ADAPTIVE))
