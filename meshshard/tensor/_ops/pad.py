"""``F.pad`` on a ShardTensor sharded along a padded dim (or several padded dims, by several mesh
dims): constant (negative pads crop), reflect, replicate and circular, across shard boundaries.
Output row ``o`` reads input row ``o - pad_left`` mapped into range by the mode; the rank owning
that row (clamped into the input) owns the output row, so the first rank with rows gets the left
padding and the last one the right padding. Each rank fetches the rows its outputs read (for
circular padding, the other end of the tensor) and selects them, one sharded dim after the other
(every mode maps each dim on its own); padding along the other dims is then applied locally."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import op_name, register
from meshshard.tensor._ops._grid import bind, empty_output, fetch, grid_input, starts_of, wrap_grid

__all__ = ["pad_handler"]


def _sources(t: torch.Tensor, n: int, mode: str) -> torch.Tensor:
    """Input row read by the output rows at input coordinates ``t`` (``-1``: constant fill)."""
    if mode == "constant":
        return torch.where((t >= 0) & (t < n), t, torch.full_like(t, -1))
    if mode == "replicate":
        return t.clamp(0, n - 1)
    if mode == "reflect":
        t = t.abs()
        return torch.where(t >= n, 2 * (n - 1) - t, t)
    return t % n  # circular


def _blocks(rows):
    """Sorted distinct rows as contiguous ``(start, stop)`` blocks."""
    out = []
    for r in rows:
        if out and out[-1][1] == r:
            out[-1][1] = r + 1
        else:
            out.append([r, r + 1])
    return [tuple(b) for b in out]


def pad_handler(func, types, args, kwargs):
    """``F.pad`` with the input sharded along any dims (a dim the pad does not touch stays local;
    several padded sharded dims are handled one after the other, the modes being separable)."""
    a = bind(("input", "pad", "mode", "value"), dict(mode="constant", value=None), args, kwargs)
    x, pad, mode = a["input"], list(a["pad"]), a["mode"]
    value = 0.0 if a["value"] is None else a["value"]
    if len(pad) % 2:
        raise ValueError(f"{op_name(func)}: pad must have an even length, got {pad}")
    g = grid_input(func, x, x.dim())
    kw = dict(mode=mode, value=value) if mode == "constant" else dict(mode=mode)
    rest = list(pad)
    todo = []  # (axis, pad left, pad right) of every sharded dim the pad touches
    for ax in g.axes:
        k = x.dim() - 1 - ax.d  # which pad pair belongs to the sharded dim
        if 2 * k < len(pad) and (pad[2 * k] or pad[2 * k + 1]):
            todo.append((ax, pad[2 * k], pad[2 * k + 1]))
            rest[2 * k], rest[2 * k + 1] = 0, 0
    if not todo:
        return wrap_grid(g, func(g.local, pad, **kw))
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"{op_name(func)}: unknown mode {mode!r}")
    counts, windows, plans = {}, {}, []
    for ax, pl, pr in todo:
        if mode != "constant" and (pl < 0 or pr < 0):
            raise ValueError(f"{op_name(func)}: negative padding {(pl, pr)} is only supported in constant mode")
        if mode == "reflect" and max(pl, pr) >= ax.n:
            raise ValueError(f"{op_name(func)}: reflect padding {(pl, pr)} must be smaller than the sharded dim's "
                             f"size {ax.n}")
        if mode == "circular" and max(pl, pr) > ax.n:
            raise ValueError(f"{op_name(func)}: circular padding {(pl, pr)} wraps around more than once (size {ax.n})")
        n_out = ax.n + pl + pr
        if n_out < 0:
            raise ValueError(f"{op_name(func)}: padding {(pl, pr)} gives a negative size along dim {ax.d}")
        t = torch.arange(n_out) - pl
        src = _sources(t, ax.n, mode)
        counts[ax.d] = ax.owned(t)
        starts = starts_of(counts[ax.d])
        needed = [sorted({int(v) for v in src[lo:lo + c].tolist() if v >= 0}) for lo, c in zip(starts, counts[ax.d])]
        windows[ax.d] = [_blocks(rows) for rows in needed]
        lo, c = starts[ax.coord], counts[ax.d][ax.coord]
        plans.append((ax, src[lo:lo + c], needed[ax.coord]))
    win = fetch(g, windows)
    empty = {}
    for ax, mine, needed in plans:  # this rank's outputs along each padded sharded dim
        c = mine.numel()
        if not c:
            empty[ax.d] = 1
        elif mode == "constant":  # fill rows sit at the two ends of this rank's outputs
            inside = mine >= 0
            left = int(inside.int().argmax()) if bool(inside.any()) else c
            one = [0, 0] * x.dim()
            at = 2 * (x.dim() - 1 - ax.d)
            one[at:at + 2] = [left, c - left - int(inside.sum())]
            win = func(win, one, **kw)
        else:
            pos = {r: i for i, r in enumerate(needed)}
            index = torch.tensor([pos[int(v)] for v in mine.tolist()], dtype=torch.long, device=win.device)
            win = win.index_select(ax.d, index)
    if empty:
        return wrap_grid(g, empty_output(lambda z: func(z, rest, **kw), win, empty), counts)
    return wrap_grid(g, func(win, rest, **kw) if any(rest) else win, counts)


register(pad_handler, (F.pad,))
