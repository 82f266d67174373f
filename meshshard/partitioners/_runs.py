"""Weight-balanced cuts of a 1-D order without sorting everything.

"Sort the items by (value, id), then cut the sequence where the prefix weight is nearest each
target fraction" is what RCB and the space-filling curves need. A full sort costs
``O(n log n)``; here the items are first counted into monotone buckets, and only the few buckets a
cut falls in are sorted, in one compiled pass (:func:`~meshshard.partitioners._kernels.runs.bucketed_runs`).
The answer is the same as the full sort's (for integer weights, bit for bit); the full sort remains
as the fallback when minimum run sizes push a cut out of its bucket (tiny inputs, extreme weights).
:func:`bisect_range` makes the one cut of a recursive bisection (``"kdtree"``, ``"inertial"``) in place.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from meshshard.partitioners._kernels.axis_split import split_at
from meshshard.partitioners._kernels.runs import bucketed_runs, enforce_min_sizes, nearest_prefixes

__all__ = ["balanced_runs", "bisect_range"]

_NO_WEIGHTS = np.empty(0)  # bucketed_runs' "unit weights"


def _runs_from_order(order: np.ndarray, pos: np.ndarray, n: int) -> np.ndarray:
    run = np.empty(n, dtype=np.int64)
    run[order] = np.searchsorted(pos, np.arange(n), side="right")
    return run


def balanced_runs(
    values: np.ndarray,
    weights: Optional[np.ndarray],
    fractions: Sequence[float],
    run_min: Sequence[int],
    bucket: Optional[np.ndarray] = None,
    num_buckets: int = 0,
) -> np.ndarray:
    """Run id of every item when the items, ordered by ``(value, index)``, are cut by weight.

    Args:
        values: ``[n]`` sort keys (``uint64`` curve keys or float coordinates).
        weights: ``[n]`` non-negative float64 weights, or ``None`` for unit weights.
        fractions: ``R - 1`` increasing cut fractions of the total weight (``j / P`` for ``P``
            equal runs).
        run_min: ``R`` minimum run sizes (1 to keep runs non-empty); ``sum(run_min) <= n``.
        bucket: optional int64 ``[n]`` bucket ids in ``[0, num_buckets)``, non-decreasing in
            ``values`` (a coarse version of the order). Without it, one full sort is done.
        num_buckets: number of buckets.

    Returns:
        int64 ``[n]`` run ids in ``[0, R)``.
    """
    n = values.shape[0]
    fractions = np.asarray(fractions, dtype=np.float64)
    run_min = np.asarray(run_min, dtype=np.int64)
    if fractions.size == 0:
        return np.zeros(n, dtype=np.int64)
    total = float(weights.sum()) if weights is not None else float(n)
    targets = fractions * total
    if bucket is not None:  # compiled: cheaper than one sort at every size
        run = _bucketed(values, weights, targets, run_min, bucket, num_buckets)
        if run is not None:
            return run
    # introsort is faster than the stable sort and gives the same order when no
    # two values are equal, which one comparison of neighbours shows
    order = np.argsort(values)
    ordered = values[order]
    if n > 1 and (ordered[1:] == ordered[:-1]).any():
        order = np.argsort(values, kind="stable")
    w = np.ones(n) if weights is None else weights[order]
    pos = nearest_prefixes(np.concatenate([[0.0], np.cumsum(w)]), np.ascontiguousarray(targets, np.float64))
    return _runs_from_order(order, enforce_min_sizes(pos, run_min, n), n)


def _bucketed(values, weights, targets, run_min, bucket, num_buckets) -> Optional[np.ndarray]:
    """The cut by bucket (:func:`~meshshard.partitioners._kernels.runs.bucketed_runs`), or None when a minimum
    size moved a cut out of its bucket."""
    run, ok = bucketed_runs(values, _NO_WEIGHTS if weights is None else np.ascontiguousarray(weights, np.float64),
                            np.ascontiguousarray(targets, np.float64), np.ascontiguousarray(run_min, np.int64),
                            np.ascontiguousarray(bucket, np.int64), int(num_buckets))
    return run if ok else None


def bisect_range(values: np.ndarray, idx: np.ndarray, start: int, end: int, k_left: int, k: int,
                 weights: Optional[np.ndarray] = None) -> int:
    """One cut of a recursive bisection: reorder the subdomain ``idx[start:end]`` (of ``k`` parts) in place so that
    the nodes first in ``(value, id)`` order, those holding ``k_left / k`` of its weight, come first -> their count.

    Unweighted, the count is ``round(m k_left / k)`` and the nodes are found by a linear-time selection
    (``np.partition``, then :func:`~meshshard.partitioners._kernels.axis_split.split_at`), each side keeping its order;
    weighted, the subdomain is sorted by ``(value, id)`` once and cut where the prefix weight is nearest the target.
    Either way each side keeps at least as many nodes as parts.

    Args:
        values: ``[m]`` positions of the subdomain's nodes, in ``idx[start:end]`` order (``m = end - start``).
        idx: int64 ``[N]`` node ids, subdomains as ranges (modified).
        start, end: the subdomain's range of ``idx``.
        k_left, k: the parts of the first side and of the subdomain, ``1 <= k_left < k <= m``.
        weights: optional float64 ``[N]`` node weights (by node id).

    Returns:
        The number of nodes of the first side.
    """
    m = end - start
    k_right = k - k_left
    if weights is None:
        n_left = min(max(int(round(m * k_left / k)), k_left), m - k_right)  # every part keeps >= 1 node
        split_at(values, np.partition(values, n_left - 1)[n_left - 1], idx, start, end, n_left)
        return n_left
    seg = idx[start:end]
    order = np.lexsort((seg, values))  # by value, ties by global id
    cum = np.cumsum(weights.take(seg.take(order)))
    target = cum[-1] * k_left / k
    hi = int(np.searchsorted(cum, target, side="left")) + 1
    lo = hi - 1
    w_lo = cum[lo - 1] if lo > 0 else 0.0
    w_hi = cum[min(hi - 1, m - 1)]
    n_left = lo if target - w_lo <= w_hi - target else hi
    idx[start:end] = seg.take(order)
    return min(max(n_left, k_left), m - k_right)
