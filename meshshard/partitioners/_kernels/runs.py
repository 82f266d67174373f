"""Compiled (numba) weight-balanced runs of a 1-D order: the cuts of the curve methods and of the bucketed sort.

:func:`~meshshard.partitioners._runs.balanced_runs` calls these: cut the ``(value, id)`` order where the prefix
weight is nearest each target, sorting only the buckets a cut falls in. The results are those of the numpy
passes they replaced bit for bit: the same sums in the same order, the same ``(value, id)`` order.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["bucketed_runs", "enforce_min_sizes", "nearest_prefixes"]


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
    ``targets``, sorting only the buckets a cut falls in (see :mod:`meshshard.partitioners._runs`).

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
