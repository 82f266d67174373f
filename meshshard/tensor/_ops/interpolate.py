"""``F.interpolate`` on a ShardTensor ``[N, C, *spatial]`` sharded along a spatial dim, or along
several spatial dims by several mesh dims: nearest, nearest-exact, linear, bilinear, trilinear,
bicubic (align_corners both ways, ``size`` or ``scale_factor``, ``recompute_scale_factor``) and
area (adaptive average pooling). Along each sharded dim the source rows and weights (two taps for
the linear modes, torch's four clamped taps with ``A = -0.75`` for bicubic) are computed with
torch's formulas in the input's precision; the rank owning an output's first source row owns the
output and fetches the rows it reads (one sharded dim after the other, see :mod:`._grid`). The
other dims are then interpolated locally (the methods are separable). antialias along a sharded
dim is refused."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import WAY_OUT, op_name, register
from meshshard.tensor._ops._grid import bind, empty_output, fetch, grid_input, starts_of, wrap_grid

__all__ = ["interpolate_handler"]

_LINEAR = ("linear", "bilinear", "trilinear")
_AREA = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}


def _per_dim(v, nd):
    return list(v) if isinstance(v, (list, tuple)) else [v] * nd


def _ratio(n, m, scale, dtype):
    """Input rows per output row as torch computes it: ``1 / scale`` when the user's scale is
    used, else ``n / m`` divided in ``dtype``."""
    if scale:
        return torch.tensor(1.0 / scale, dtype=dtype)
    return torch.tensor(float(n), dtype=dtype) / torch.tensor(float(m), dtype=dtype)


def _source_rows(n, m, mode, align_corners, scale, dtype):
    """torch's source rows ``(i0, i1)`` and weight of ``i1`` for the ``m`` outputs of ``n`` rows
    (``scale``: the user's scale factor when torch uses it for the mapping, else ``None``)."""
    o = torch.arange(m, dtype=dtype)
    if mode in ("nearest", "nearest-exact"):
        # torch: a float32 scale; nearest multiplies in float32, nearest-exact in float64
        ratio = _ratio(n, m, scale, torch.float32)
        if mode == "nearest":
            i0 = (o.float() * ratio).floor().long()
            if m == 2 * n:
                i0 = torch.arange(m) // 2
        else:
            i0 = ((o.double() + 0.5) * ratio.double()).floor().long()
        i0 = torch.arange(m) if n == m else i0.clamp(max=n - 1)
        return i0, i0, None
    if n == m:
        i0 = torch.arange(m)
        return i0, i0, torch.zeros(m, dtype=dtype)
    if align_corners:
        ratio = torch.tensor((n - 1) / (m - 1) if m > 1 else 0.0, dtype=dtype)
        src = ratio * o
    else:
        ratio = _ratio(n, m, scale, dtype)
        src = (ratio * (o + 0.5) - 0.5).clamp(min=0)
    i0 = src.floor().long().clamp(max=n - 1)
    lam = (src - i0.to(dtype)).clamp(0, 1)
    i1 = torch.where(i0 < n - 1, i0 + 1, i0)
    return i0, i1, lam


def _cubic_rows(n, m, align_corners, scale, dtype):
    """torch's bicubic taps along one dim: ``[m, 4]`` source rows (clamped into ``[0, n)``) and
    their ``[m, 4]`` weights (``A = -0.75``), computed as torch computes them."""
    o = torch.arange(m, dtype=dtype)
    if align_corners:
        src = torch.tensor((n - 1) / (m - 1) if m > 1 else 0.0, dtype=dtype) * o
    else:
        src = _ratio(n, m, scale, dtype) * (o + 0.5) - 0.5  # not clamped at 0 for cubic
    i0 = src.floor().long().clamp(max=n - 1)
    t = (src - i0.to(dtype)).clamp(0, 1)
    a = -0.75

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    weights = torch.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], 1)
    rows = (i0[:, None] + torch.arange(-1, 3)[None, :]).clamp(0, n - 1)
    return rows, weights


def interpolate_handler(func, types, args, kwargs):
    """``F.interpolate`` with the input sharded along spatial dims (and / or the batch dim)."""
    a = bind(("input", "size", "scale_factor", "mode", "align_corners", "recompute_scale_factor", "antialias"),
             dict(size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                  antialias=False), args, kwargs)
    x = a.pop("input")
    nd = x.dim() - 2
    g = grid_input(func, x, nd)
    if not g.spatial:
        return wrap_grid(g, func(g.local, **a))
    mode = a["mode"]
    if (a["size"] is None) == (a["scale_factor"] is None):
        raise ValueError(f"{op_name(func)}: give exactly one of size and scale_factor")
    if mode == "area":
        size = list(_per_dim(a["size"], nd)) if a["size"] is not None else \
            [math.floor(x.shape[2 + i] * float(v)) for i, v in enumerate(_per_dim(a["scale_factor"], nd))]
        return _AREA[nd](x, size)
    if mode not in ("nearest", "nearest-exact", "bicubic") + _LINEAR or a["antialias"]:
        raise NotImplementedError(f"ShardTensor: {op_name(func)} mode={mode!r}"
                                  f"{' with antialias' if a['antialias'] else ''} along the sharded dim "
                                  f"{g.spatial[0].d}; {WAY_OUT}")
    counts, windows, plans = {}, {}, []
    for ax in g.spatial:
        j = ax.j
        if a["size"] is not None:
            m = int(_per_dim(a["size"], nd)[j])
            scale = None
        else:
            sf = float(_per_dim(a["scale_factor"], nd)[j])
            m = math.floor(ax.n * sf)
            scale = None if a["recompute_scale_factor"] else sf
        if m < 1:
            raise ValueError(f"{op_name(func)}: output size {m} along the sharded dim {ax.d}")
        if mode == "bicubic":
            taps, lam = _cubic_rows(ax.n, m, bool(a["align_corners"]), scale, x.dtype)
        else:
            i0, i1, lam = _source_rows(ax.n, m, mode, bool(a["align_corners"]), scale, x.dtype)
            taps = torch.stack([i0, i1], 1)
            lam = None if lam is None else torch.stack([1 - lam, lam], 1)
        counts[ax.d] = ax.owned(taps[:, 0])
        starts = starts_of(counts[ax.d])
        windows[ax.d] = [[(int(taps[lo, 0]), int(taps[lo:lo + c].max()) + 1) if c else (0, 0)]
                         for lo, c in zip(starts, counts[ax.d])]
        plans.append((ax, starts[ax.coord], counts[ax.d][ax.coord], taps, lam))
    win = fetch(g, windows)
    rest = dict(a)
    sharded = {ax.j: counts[ax.d][ax.coord] for ax in g.spatial}
    if a["size"] is not None:
        rest["size"] = [sharded.get(i, v) for i, v in enumerate(_per_dim(a["size"], nd))]
    else:
        rest["scale_factor"] = [1.0 if i in sharded else float(v)
                                for i, v in enumerate(_per_dim(a["scale_factor"], nd))]

    def others(t):  # the remaining dims (identity along the sharded ones)
        return t if len(sharded) == nd else func(t, **rest)

    dev = win.device  # the source rows are computed on the CPU (their counts decide the layout)
    empty = {}
    for ax, lo, c, taps, lam in plans:  # along each sharded dim in turn (the methods are separable)
        if not c:
            empty[ax.d] = 1
            continue
        base = windows[ax.d][ax.coord][0][0]
        rows = (taps[lo:lo + c] - base).to(dev)
        if lam is None:  # nearest
            win = win.index_select(ax.d, rows[:, 0])
            continue
        shape = [-1] + [1] * (win.dim() - 1 - ax.d)
        w = lam[lo:lo + c].to(device=dev, dtype=win.dtype)
        out = win.index_select(ax.d, rows[:, 0]) * w[:, 0].reshape(shape)
        for k in range(1, taps.shape[1]):
            out = out + win.index_select(ax.d, rows[:, k]) * w[:, k].reshape(shape)
        win = out
    if empty:
        if rest["size"] is not None:
            rest["size"] = [1 if g.first + i in empty else v for i, v in enumerate(rest["size"])]
        return wrap_grid(g, empty_output(others, win, empty), counts)
    return wrap_grid(g, others(win), counts)


register(interpolate_handler, (F.interpolate,))
