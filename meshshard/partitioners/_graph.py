"""Undirected graph helpers (numpy / scipy.sparse) shared by METIS, refinement and quality."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

__all__ = ["undirected_pairs", "symmetric_csr"]


def undirected_pairs(
    edge_index: np.ndarray, num_nodes: int, edge_weights: Optional[np.ndarray] = None
) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
    """Each undirected edge once, as ``lo < hi``; self loops dropped.

    An edge given in both directions (or repeated) is counted once; its weight is the largest
    weight given for it, so one-direction and both-direction inputs mean the same graph.

    Args:
        edge_index: int64 ``[2, E]`` with ids in ``[0, N)``.
        num_nodes: ``N``.
        edge_weights: optional float64 ``[E]``.

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
    """CSR of the symmetric adjacency of undirected edges.

    Args:
        lo, hi: int64 ``[M]`` end points of each undirected edge (as from :func:`undirected_pairs`).
        w: optional float64 ``[M]`` edge weights.
        num_nodes: ``N``.

    Returns:
        ``(indptr [N + 1], indices [2M], data [2M] or None)``; neighbours of each node sorted by id.
    """
    src = np.concatenate([lo, hi])
    dst = np.concatenate([hi, lo])
    order = np.lexsort((dst, src))
    indices = dst[order]
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_nodes), out=indptr[1:])
    data = None if w is None else np.concatenate([w, w])[order]
    return indptr, indices, data
