"""``F.pad`` on a ShardTensor sharded along a padded dim: constant (negative pads crop), reflect,
replicate and circular, across shard boundaries. Output row ``o`` reads input row
``o - pad_left`` mapped into range by the mode; the rank owning that row (clamped into the input)
owns the output row, so the first rank with rows gets the left padding and the last one the right
padding. Each rank fetches the rows its outputs read (for circular padding, the other end of the
tensor) and selects them; padding along the other dims is then applied locally."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from meshshard.tensor._ops._common import op_name, register
from meshshard.tensor._ops._grid import bind, empty_output, fetch, grid_input, owned_outputs, wrap_grid

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
    """``F.pad`` with the input sharded along any dim (a dim the pad does not touch stays local)."""
    a = bind(("input", "pad", "mode", "value"), dict(mode="constant", value=None), args, kwargs)
    x, pad, mode = a["input"], list(a["pad"]), a["mode"]
    value = 0.0 if a["value"] is None else a["value"]
    if len(pad) % 2:
        raise ValueError(f"{op_name(func)}: pad must have an even length, got {pad}")
    g = grid_input(func, x, x.dim())
    kw = dict(mode=mode, value=value) if mode == "constant" else dict(mode=mode)
    k = None if g.sd is None else x.dim() - 1 - g.dim  # which pad pair belongs to the sharded dim
    if k is None or 2 * k >= len(pad) or (pad[2 * k] == 0 and pad[2 * k + 1] == 0):
        return wrap_grid(g, func(g.local, pad, **kw), None)
    pl, pr = pad[2 * k], pad[2 * k + 1]
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"{op_name(func)}: unknown mode {mode!r}")
    if mode != "constant" and (pl < 0 or pr < 0):
        raise ValueError(f"{op_name(func)}: negative padding {(pl, pr)} is only supported in constant mode")
    if mode == "reflect" and max(pl, pr) >= g.n:
        raise ValueError(f"{op_name(func)}: reflect padding {(pl, pr)} must be smaller than the sharded dim's "
                         f"size {g.n}")
    if mode == "circular" and max(pl, pr) > g.n:
        raise ValueError(f"{op_name(func)}: circular padding {(pl, pr)} wraps around more than once (size {g.n})")
    n_out = g.n + pl + pr
    if n_out < 0:
        raise ValueError(f"{op_name(func)}: padding {(pl, pr)} gives a negative size along dim {g.dim}")
    t = torch.arange(n_out) - pl
    src = _sources(t, g.n, mode)
    counts = owned_outputs(g, t)
    starts = [sum(counts[:r]) for r in range(len(counts))]
    needed = [sorted({int(v) for v in src[lo:lo + c].tolist() if v >= 0}) for lo, c in zip(starts, counts)]
    win = fetch(g, [_blocks(rows) for rows in needed])
    rest = list(pad)
    rest[2 * k], rest[2 * k + 1] = 0, 0
    lo, c = starts[g.coord], counts[g.coord]
    if not c:
        return wrap_grid(g, empty_output(g, lambda z: func(z, rest, **kw), win, 1), counts)
    mine = src[lo:lo + c]
    if mode == "constant":  # fill rows sit at the two ends of this rank's outputs
        inside = mine >= 0
        left = int(inside.int().argmax()) if bool(inside.any()) else c
        rest[2 * k], rest[2 * k + 1] = left, c - left - int(inside.sum())
        return wrap_grid(g, func(win, rest, **kw), counts)
    pos = {r: i for i, r in enumerate(needed[g.coord])}
    index = torch.tensor([pos[int(v)] for v in mine.tolist()], dtype=torch.long, device=win.device)
    return wrap_grid(g, func(win.index_select(g.dim, index), rest, **kw), counts)


register(pad_handler, (F.pad,))
