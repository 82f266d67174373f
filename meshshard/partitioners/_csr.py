"""Undirected graph helpers (numpy, one numba kernel) shared by METIS, refinement and quality."""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from meshshard.partitioners._kernels.csr import indptr_if_symmetric_csr

__all__ = ["undirected_pairs", "symmetric_csr", "csr_view", "graph_csr"]


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


def csr_view(edge_index: np.ndarray, num_nodes: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The symmetric CSR of a graph that is already one in edge-list form, without copying it.

    A mesh's ``edge_index`` (:func:`meshshard.io.edge_index_from_cells`: both directions, no
    repeats, no self loops, sorted by (row 0, row 1)) is the CSR of its graph once the row
    pointers are counted: its row 1 serves as ``indices`` as it is, where
    :func:`undirected_pairs` + :func:`symmetric_csr` would make several ``[E]`` copies.

    Args:
        edge_index: int64 or int32 ``[2, E]`` with ids in ``[0, N)``.
        num_nodes: ``N``.

    Returns:
        ``(indptr int64 [N + 1], indices [E])`` with ``indices`` a view of
        ``edge_index[1]`` (the same arrays :func:`symmetric_csr` would build), or None when the
        edge list is not in that form.
    """
    dtype = np.int32 if np.asarray(edge_index).dtype == np.int32 else np.int64  # int32 ids: no copy
    src = np.ascontiguousarray(edge_index[0], dtype=dtype)
    dst = np.ascontiguousarray(edge_index[1], dtype=dtype)
    indptr, ok = indptr_if_symmetric_csr(src, dst, int(num_nodes))
    return (indptr, dst) if ok else None


def graph_csr(edge_index: np.ndarray, num_nodes: int, edge_weights: Optional[np.ndarray] = None):
    """Symmetric CSR of a graph given as an edge list in any form (one or both directions, repeats, loops).

    Args:
        edge_index: int64 ``[2, E]`` with ids in ``[0, N)``.
        num_nodes: ``N``.
        edge_weights: optional float64 ``[E]`` (a repeated edge keeps its largest weight).

    Returns:
        ``(indptr [N + 1], indices [2M], data [2M] or None)`` as :func:`symmetric_csr`; without
        weights, from :func:`csr_view` when the edge list already is the CSR.
    """
    if edge_weights is None:
        view = csr_view(edge_index, num_nodes)
        if view is not None:  # the graph engines take int64 ids
            return view[0], view[1].astype(np.int64, copy=False), None
    lo, hi, w = undirected_pairs(edge_index, num_nodes, edge_weights)
    return symmetric_csr(lo, hi, w, num_nodes)
