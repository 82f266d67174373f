"""Compiled (numba) candidate lists: a superset of the boundary nodes that FM and rebalancing scan instead of all nodes.

A candidate list is ``(listed bool [n], cand int64 [n], count int64 [1])``: ``cand[:count[0]]`` are the nodes,
``listed`` marks them. The kernels that move nodes add each moved node's neighbours, so the list stays a
superset of the boundary; a finer level's list is projected from its coarser level's.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["list_around", "candidate_cut", "boundary_candidates", "project_candidates"]


@njit(cache=True, nogil=True)
def _list_boundary(indptr, indices, assign, listed, cand):
    """Put every node with a neighbour in another part into ``cand`` (and mark it in ``listed``); returns the count."""
    nc = 0
    for u in range(assign.shape[0]):
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            if assign[indices[e]] != a:
                listed[u] = True
                cand[nc] = u
                nc += 1
                break
    return nc


@njit(cache=True, inline="always")
def list_around(u, indptr, indices, listed, cand, nc):
    """Add ``u`` and its neighbours to ``cand`` unless ``listed``; returns the new count."""
    if not listed[u]:
        listed[u] = True
        cand[nc] = u
        nc += 1
    for e in range(indptr[u], indptr[u + 1]):
        v = indices[e]
        if not listed[v]:
            listed[v] = True
            cand[nc] = v
            nc += 1
    return nc


@njit(cache=True, nogil=True)
def candidate_cut(indptr, indices, data, assign, cand, nc):
    """Cut weight, counted over the candidates ``cand[:nc]`` (which must hold every boundary node)."""
    cut = 0.0
    for i in range(nc):
        u = cand[i]
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            if assign[indices[e]] != a:
                cut += data[e]
    return 0.5 * cut


@njit(cache=True, nogil=True)
def boundary_candidates(indptr, indices, assign):
    """The boundary nodes as a candidate list -> ``(listed bool [n], cand int64 [n], count int64 [1])``:
    ``cand[:count[0]]`` are the nodes, ``listed`` marks them. :func:`rebalance` and :func:`fm_refine`
    take it and keep it a superset of the boundary as they move nodes."""
    n = assign.shape[0]
    listed = np.zeros(n, dtype=np.bool_)
    cand = np.empty(n, dtype=np.int64)
    count = np.zeros(1, dtype=np.int64)
    count[0] = _list_boundary(indptr, indices, assign, listed, cand)
    return listed, cand, count


@njit(cache=True, nogil=True)
def project_candidates(cmap, coarse_listed):
    """Candidate list of a finer level from its coarser level's ``listed`` (see :func:`boundary_candidates`).

    A fine node has a neighbour in another part only if its cluster ``cmap[u]`` has one, so the
    members of listed clusters cover the fine boundary: O(n), where listing it afresh is O(nnz).
    """
    n = cmap.shape[0]
    listed = np.zeros(n, dtype=np.bool_)
    cand = np.empty(n, dtype=np.int64)
    count = np.zeros(1, dtype=np.int64)
    nc = 0
    for u in range(n):
        if coarse_listed[cmap[u]]:
            listed[u] = True
            cand[nc] = u
            nc += 1
    count[0] = nc
    return listed, cand, count
