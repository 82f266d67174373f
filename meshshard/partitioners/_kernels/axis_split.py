"""Compiled (numba) cuts of recursive coordinate bisection (``"kdtree"``): one box's values along its widest axis,
and the box reordered around a cut.

They replace a dozen numpy calls per bisection (per-call overhead on the path before refinement can begin,
holding the GIL while :func:`~meshshard.partitioners.multilevel.multilevel_refine`'s second thread coarsens);
the results are those of the numpy passes bit for bit. The selection of the cut's value itself stays numpy's
``np.partition``, which is faster than numba's.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["split_at", "widest_axis_values"]


@njit(cache=True, nogil=True)
def widest_axis_values(coords, half, idx, start, end):
    """The coordinates of the box ``idx[start:end]`` along the axis of its largest extent (the first on ties),
    in ``idx`` order: the values one cut of recursive coordinate bisection orders by.

    Args:
        coords: float ``[d, N]`` coordinates, one row per axis.
        half: ``0.5`` as a 0-d array of ``coords``' dtype: the extents are computed in that dtype (float32
            points: in float32, as :func:`~meshshard.ops.partition.partition_distributed` does).
        idx: int64 ``[N]`` node ids, boxes as ranges.
        start, end: the box's range of ``idx`` (at least one node).

    Returns:
        ``[end - start]`` values of ``coords``' dtype.
    """
    m = end - start
    h = half[()]
    axis, widest = 0, -1.0
    for a in range(coords.shape[0]):
        lo = hi = coords[a, idx[start]]
        for i in range(start + 1, end):
            x = coords[a, idx[i]]
            lo = min(lo, x)
            hi = max(hi, x)
        extent = hi * h - lo * h  # halves: no overflow near 1e308
        if extent > widest:
            axis, widest = a, extent
    v = np.empty(m, dtype=coords.dtype)
    for i in range(m):
        v[i] = coords[axis, idx[start + i]]
    return v


@njit(cache=True, nogil=True)
def split_at(v, pivot, idx, start, end, count):
    """Reorder the box ``idx[start:end]`` in place so that its ``count`` nodes first in ``(value, id)`` order
    come first, each side keeping its order; ``v``: the box's values in ``idx`` order, ``pivot``: the
    ``count``-th smallest of them (``np.partition``, which is linear time and faster than numba's)."""
    m = end - start
    below, tied = 0, 0
    for i in range(m):
        if v[i] < pivot:
            below += 1
        elif v[i] == pivot:
            tied += 1
    need = count - below  # >= 1: the pivot is the count-th value
    max_id = np.iinfo(np.int64).max  # tied nodes go left up to this id: the `need` smallest ids
    if need < tied:
        tied_ids = np.empty(tied, dtype=np.int64)
        t = 0
        for i in range(m):
            if v[i] == pivot:
                tied_ids[t] = idx[start + i]
                t += 1
        max_id = np.sort(tied_ids)[need - 1]
    seg = idx[start:end].copy()
    left, right = start, start + count
    for i in range(m):
        if v[i] < pivot or (v[i] == pivot and seg[i] <= max_id):
            idx[left] = seg[i]
            left += 1
        else:
            idx[right] = seg[i]
            right += 1
