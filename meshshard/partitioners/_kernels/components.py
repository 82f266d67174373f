"""Compiled (numba) connected components of each part, and the repair that merges a part's pieces into neighbours.

Union-find over the edges (CSR or edge list), each set rooted at its smallest node, so labels are numbered in
the order of each component's smallest node id. Two threads count the pieces of a large graph's parts: each joins
the edges inside its range of node ids (:func:`union_in_range`), then the edges between the ranges are joined
(:func:`join_across`).
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.csr import group_by_label, part_loads

__all__ = ['label_components', 'label_components_edges', 'repair_components', 'union_in_range', 'join_across']


@njit(cache=True, inline="always")
def _root(parent, u):
    """Root of ``u`` in the union-find forest ``parent``, halving the path on the way."""
    while parent[u] != u:
        parent[u] = parent[parent[u]]
        u = parent[u]
    return u


@njit(cache=True, inline="always")
def _union(parent, u, v):
    """Join the sets of ``u`` and ``v``; the smaller id becomes the root, so each root is its set's smallest node."""
    ru, rv = _root(parent, u), _root(parent, v)
    if ru < rv:
        parent[rv] = ru
    elif rv < ru:
        parent[ru] = rv


@njit(cache=True, nogil=True)
def _labels(parent):
    """``(label [n], count)`` of a union-find forest whose roots are their sets' smallest nodes, numbered in
    root order."""
    n = parent.shape[0]
    label = np.empty(n, dtype=np.int64)
    count = 0
    for u in range(n):  # a root precedes the rest of its component, so its label is set first
        r = _root(parent, u)
        if r == u:
            label[u] = count
            count += 1
        else:
            label[u] = label[r]
    return label, count


@njit(cache=True, nogil=True)
def label_components(indptr, indices, assign):
    """Connected components of each part's induced subgraph (symmetric CSR) -> ``(label [n], count)``.

    Labels are numbered in the order of each component's smallest node id. Union-find over the
    edges in CSR order: the rows are read in sequence, where a graph search reads them in
    search order, which misses the cache on a mesh numbered without locality.
    """
    n = assign.shape[0]
    parent = np.arange(n)
    for u in range(n):
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if v > u and assign[v] == a:
                _union(parent, u, v)
    return _labels(parent)


@njit(cache=True, nogil=True)  # two threads join two ranges at once
def union_in_range(indptr, indices, assign, parent, lo, hi, cross):
    """:func:`label_components`'s union-find of the edges inside a part between the nodes ``[lo, hi)``, into
    ``parent`` (int64 ``[n]``, ``parent[u] = u`` to start); such an edge to a node at or above ``hi`` is written into
    ``cross`` as a pair instead (for :func:`join_across`). Reads and writes only ``parent[lo:hi]``: two threads can join
    two ranges at once. Returns the entries written into ``cross`` (twice the edges)."""
    k = 0
    for u in range(lo, hi):
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if v > u and assign[v] == a:
                if v < hi:
                    _union(parent, u, v)
                else:
                    cross[k] = u
                    cross[k + 1] = v
                    k += 2
    return k


@njit(cache=True, nogil=True)
def join_across(parent, cross, k):
    """Join the pairs ``cross[:k]`` that :func:`union_in_range` set aside -> the number of sets: with every range joined
    before, :func:`label_components`'s count."""
    for i in range(0, k, 2):
        _union(parent, cross[i], cross[i + 1])
    count = 0
    for u in range(parent.shape[0]):
        if parent[u] == u:
            count += 1
    return count


@njit(cache=True, nogil=True)  # save_parts runs it in a thread beside the writing
def label_components_edges(src, dst, assign):
    """:func:`label_components` of an edge list ``src[i] - dst[i]`` (one or both directions, any order):
    no CSR to build or check."""
    parent = np.arange(assign.shape[0])
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if assign[u] == assign[v]:
            _union(parent, u, v)
    return _labels(parent)


@njit(cache=True, nogil=True)
def repair_components(indptr, indices, data, vw, assign, num_parts, max_w):
    """Merge every piece of a part but its heaviest into the neighbouring part it shares most edge weight with.

    A piece moves only where the target keeps within ``max_w`` (else the next best neighbour is
    tried); pieces with no edge to another part (a separate component of the graph) stay.
    Modifies ``assign``. Returns the number of pieces left that are not their part's heaviest.
    """
    n = assign.shape[0]
    part_w = part_loads(assign, vw, num_parts)[0]
    left = 0
    for sweep in range(4):  # a merge can make a neighbour's piece mergeable, so sweep again
        label, count = label_components(indptr, indices, assign)
        comp_w = np.zeros(count)
        comp_part = np.empty(count, dtype=np.int64)
        for u in range(n):
            comp_w[label[u]] += vw[u]
            comp_part[label[u]] = assign[u]
        heaviest = np.full(num_parts, -1, dtype=np.int64)
        for c in range(count):
            p = comp_part[c]
            if heaviest[p] < 0 or comp_w[c] > comp_w[heaviest[p]]:
                heaviest[p] = c
        pieces = count
        for p in range(num_parts):
            if heaviest[p] >= 0:
                pieces -= 1
        if pieces == 0:  # every part is connected (the usual case): nothing to sort or merge
            return 0
        start, members = group_by_label(label, count)  # nodes grouped by component
        conn = np.zeros(num_parts)
        # lightest pieces first: they are the cheapest to move and the likeliest to fit
        order = np.argsort(comp_w)
        left, moved = 0, 0
        for i in range(count):
            c = order[i]
            p = comp_part[c]
            if heaviest[p] == c:
                continue
            for k in range(start[c], start[c + 1]):
                u = members[k]
                for e in range(indptr[u], indptr[u + 1]):
                    q = assign[indices[e]]
                    if q != p:
                        conn[q] += data[e]
            target = -1
            for q in range(num_parts):
                if conn[q] > 0.0 and part_w[q] + comp_w[c] <= max_w:
                    if target < 0 or conn[q] > conn[target]:
                        target = q
                conn[q] = 0.0
            if target < 0:
                left += 1
                continue
            for k in range(start[c], start[c + 1]):
                assign[members[k]] = target
            part_w[p] -= comp_w[c]
            part_w[target] += comp_w[c]
            moved += 1
        if moved == 0:
            break
    return left
