"""Undirected graph helpers (numpy / scipy.sparse) shared by METIS, refinement and quality."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

__all__ = ["undirected_pairs", "symmetric_csr", "balanced_cuts"]


def undirected_pairs(
    edge_index: np.ndarray, num_nodes: int, edge_weights: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Each undirected edge once, as ``lo < hi``; self loops dropped.

    An edge given in both directions (or repeated) is counted once; its weight is the largest
    weight given for it, so one-direction and both-direction inputs mean the same graph.

    Returns:
        ``(lo, hi, w)``: int64 ``[M]`` twice and float64 ``[M]`` (None without edge_weights),
        sorted by ``(lo, hi)``.
    """
    a, b = edge_index[0], edge_index[1]
    keep = a != b
    lo, hi = np.minimum(a[keep], b[keep]), np.maximum(a[keep], b[keep])
    n = np.int64(max(num_nodes, 1))
    key = lo * n + hi
    if edge_weights is None:
        key.sort()
        if key.size:
            key = key[np.concatenate(([True], key[1:] != key[:-1]))]
        lo, hi = np.divmod(key, n)
        return lo, hi, None
    w = edge_weights[keep]
    order = np.lexsort((-w, key))  # by key, heaviest first
    key, w = key[order], w[order]
    first = np.concatenate(([True], key[1:] != key[:-1])) if key.size else np.zeros(0, bool)
    lo, hi = np.divmod(key[first], n)
    return lo, hi, w[first]


def symmetric_csr(lo: np.ndarray, hi: np.ndarray, w: Optional[np.ndarray], num_nodes: int):
    """CSR of the symmetric adjacency: ``(indptr [N+1], indices [2M], data [2M] or None)``.

    Neighbours of each node are sorted by id.
    """
    src = np.concatenate([lo, hi])
    dst = np.concatenate([hi, lo])
    order = np.lexsort((dst, src))
    indices = dst[order]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    data = None if w is None else np.concatenate([w, w])[order]
    return indptr, indices, data


def balanced_cuts(cum_weight: np.ndarray, num_parts: int) -> np.ndarray:
    """Boundaries ``b[0]=0 < b[1] < ... < b[P]=n`` cutting a sequence into ``P`` runs of even weight.

    Args:
        cum_weight: float64 ``[n]`` inclusive cumulative weights of the items in order
            (``n >= num_parts``).
        num_parts: ``P``.

    Returns:
        int64 ``[P + 1]``; every run is non-empty; each boundary sits at the item count whose
        cumulative weight is nearest the ideal ``r * W / P``.
    """
    n = cum_weight.shape[0]
    total = cum_weight[-1]
    targets = total * np.arange(1, num_parts) / num_parts
    # b items before the cut have weight cum[b-1]; pick b nearest the target
    hi = np.searchsorted(cum_weight, targets, side="left") + 1  # first b with cum[b-1] >= target
    lo = hi - 1
    w_lo = np.where(lo > 0, cum_weight[np.maximum(lo - 1, 0)], 0.0)
    w_hi = cum_weight[np.minimum(hi - 1, n - 1)]
    b = np.where(targets - w_lo <= w_hi - targets, lo, hi)
    r = np.arange(1, num_parts)
    c = np.clip(b - r, 0, n - num_parts)  # non-empty runs: b[r] - r non-decreasing in [0, n-P]
    c = np.maximum.accumulate(c) if c.size else c
    return np.concatenate(([0], c + r, [n])).astype(np.int64)
