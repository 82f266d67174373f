"""Compiled (numba) weight-balanced cuts: the starts of ``"kdtree"`` and the curve methods in a few calls.

At ~10k points the numpy passes these replace took 0.4-0.7 ms per start (2 shared cores), mostly per-call
overhead (a dozen numpy calls per bisection or per cut), on the path before refinement can begin, and
they held the GIL between calls while :func:`~meshshard.partitioners.multilevel.multilevel_refine`'s
second thread coarsens. The results are those of the numpy passes bit for bit: the same sums in the
same order, the same ``(value, id)`` order. The selection itself stays numpy's ``np.partition``
(numba's was 5-10x slower at 10k-100k values).
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._jit import njit

__all__ = ["bucketed_runs", "enforce_min_sizes", "nearest_prefixes", "split_at", "widest_axis_values"]


@njit(cache=True, inline="always")
def _nearest_prefix(cum, target):
    """Count ``k`` of leading items whose prefix weight ``cum[k]`` (``cum[0]``: the weight before them) is
    nearest ``target``; ties go to the shorter prefix."""
    k = np.searchsorted(cum, target, side="left")
    k = min(max(k, 0), cum.shape[0] - 1)
    below = max(k - 1, 0)
    if k > 0 and (target - cum[below]) <= (cum[k] - target):
        return below
    return k


@njit(cache=True, nogil=True)
def nearest_prefixes(cum, targets):
    """:func:`_nearest_prefix` of every target -> int64 ``[len(targets)]`` (``cum`` float64 ``[m + 1]``, non-decreasing)."""
    out = np.empty(targets.shape[0], dtype=np.int64)
    for j in range(targets.shape[0]):
        out[j] = _nearest_prefix(cum, targets[j])
    return out


@njit(cache=True, nogil=True)
def enforce_min_sizes(pos, run_min, n):
    """Move the cut positions ``pos`` (int64 ``[R - 1]``, non-decreasing) the least so that run ``r`` of ``n`` items
    holds at least ``run_min[r]`` (int64 ``[R]``) -> int64 ``[R - 1]``."""
    r = run_min.shape[0]
    lower = np.cumsum(run_min)[:-1]
    upper = n - np.cumsum(run_min[::-1])[::-1][1:]
    out = np.empty(r - 1, dtype=np.int64)
    high = np.int64(-1)
    for j in range(r - 1):
        shifted = min(max(pos[j], lower[j]), upper[j]) - lower[j]
        high = max(high, shifted)
        out[j] = high + lower[j]
    return out


@njit(cache=True, nogil=True)
def bucketed_runs(values, weights, targets, run_min, bucket, num_buckets):
    """Run id of every item, the items ordered by ``(value, id)`` and cut at the prefix weights nearest
    ``targets``, sorting only the buckets a cut falls in (see :mod:`meshshard.partitioners._cuts`).

    Args:
        values: ``[n]`` sort keys.
        weights: float64 ``[n]``, or ``[0]`` for unit weights.
        targets: float64 ``[R - 1]`` increasing prefix weights to cut at.
        run_min: int64 ``[R]`` minimum run sizes.
        bucket: int64 ``[n]`` bucket ids in ``[0, num_buckets)``, non-decreasing in ``values``.
        num_buckets: number of buckets.

    Returns:
        ``(run int64 [n], ok)``; ``ok`` is False when a minimum size moved a cut out of its bucket (then
        ``run`` is not valid and the caller sorts everything).
    """
    n = values.shape[0]
    weighted = weights.shape[0] > 0
    counts = np.zeros(num_buckets, dtype=np.int64)
    bw = np.zeros(num_buckets)
    for i in range(n):
        counts[bucket[i]] += 1
        if weighted:
            bw[bucket[i]] += weights[i]
    if not weighted:
        for b in range(num_buckets):
            bw[b] = counts[b]
    cum_w = np.cumsum(bw)
    cum_n = np.zeros(num_buckets + 1, dtype=np.int64)
    for b in range(num_buckets):
        cum_n[b + 1] = cum_n[b] + counts[b]
    cuts = targets.shape[0]
    cut_bucket = np.empty(cuts, dtype=np.int64)
    for j in range(cuts):
        cut_bucket[j] = min(np.searchsorted(cum_w, targets[j], side="left"), num_buckets - 1)
    # members of the cut buckets, grouped by bucket (buckets ascending, ids ascending inside)
    slot = np.full(num_buckets, -1, dtype=np.int64)
    first = np.empty(cuts + 1, dtype=np.int64)
    cut_ids = np.empty(cuts, dtype=np.int64)
    nb = 0
    first[0] = 0
    for j in range(cuts):
        b = cut_bucket[j]
        if slot[b] < 0:
            slot[b] = nb
            cut_ids[nb] = b
            first[nb + 1] = first[nb] + counts[b]
            nb += 1
    members = np.empty(first[nb], dtype=np.int64)
    fill = first[:nb].copy()
    for i in range(n):
        s = slot[bucket[i]]
        if s >= 0:
            members[fill[s]] = i
            fill[s] += 1
    pos = np.empty(cuts, dtype=np.int64)
    for s in range(nb):
        b = cut_ids[s]
        seg = members[first[s]:first[s + 1]]
        seg[:] = seg[np.argsort(values[seg], kind="mergesort")]  # stable: ties stay in id order
        before = cum_w[b - 1] if b > 0 else 0.0
        cum = np.empty(seg.shape[0] + 1)
        cum[0] = before
        inside = 0.0  # the bucket's own prefix, added to ``before`` at each item (the order of the numpy passes)
        for q in range(seg.shape[0]):
            inside += weights[seg[q]] if weighted else 1.0
            cum[q + 1] = before + inside
        for j in range(cuts):
            if cut_bucket[j] == b:
                pos[j] = cum_n[b] + _nearest_prefix(cum, targets[j])
    fixed = enforce_min_sizes(pos, run_min, n)
    run = np.empty(n, dtype=np.int64)
    for j in range(cuts):
        if fixed[j] < cum_n[cut_bucket[j]] or fixed[j] > cum_n[cut_bucket[j] + 1]:
            return run, False
    # whole buckets between the cuts, then the exact runs inside the cut buckets
    run_of_bucket = np.empty(num_buckets, dtype=np.int64)
    j = 0
    for b in range(num_buckets):
        while j < cuts and cut_bucket[j] < b:
            j += 1
        run_of_bucket[b] = j
    for i in range(n):
        run[i] = run_of_bucket[bucket[i]]
    for s in range(nb):
        b = cut_ids[s]
        for q in range(first[s + 1] - first[s]):
            run[members[first[s] + q]] = np.searchsorted(fixed, cum_n[b] + q, side="right")
    return run, True


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
    ``count``-th smallest of them (``np.partition``, which is linear time and ~5x faster than numba's)."""
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
