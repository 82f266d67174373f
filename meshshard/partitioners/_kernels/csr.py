"""Compiled (numba) CSR basics of the refinement: building a symmetric CSR, its cut, part loads, grouping by label.

Graphs are symmetric CSR: ``indptr`` int64 ``[n + 1]``, ``indices`` int64 or int32 ``[nnz]`` (no self loops),
``data`` float64 ``[nnz]`` edge weights; ``vw`` float64 ``[n]`` node weights; ``assign`` integer ``[n]`` part ids.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ['build_csr', 'cut_weight', 'part_loads', 'group_by_label']


@njit(cache=True, nogil=True)
def build_csr(src, dst, w, n):
    """Symmetric CSR of the undirected graph of edges ``src[i] - dst[i]`` (either or both directions given).

    Self loops are dropped; an edge given several times keeps its largest weight. Returns
    ``(indptr, indices, data)``; neighbours are in input order, not sorted. ``w`` empty: the graph is
    unweighted, and ``data`` is empty too (no ``[nnz]`` weights are built: on a large mesh they would be
    most of the refinement's peak memory).
    """
    weighted = w.shape[0] > 0
    deg = np.zeros(n + 1, dtype=np.int64)
    for i in range(src.shape[0]):
        if src[i] != dst[i]:
            deg[src[i] + 1] += 1
            deg[dst[i] + 1] += 1
    for u in range(n):
        deg[u + 1] += deg[u]
    fill = deg[:-1].copy()
    nbr = np.empty(deg[n], dtype=np.int64)
    nw = np.empty(deg[n] if weighted else 0)
    for i in range(src.shape[0]):
        a, b = src[i], dst[i]
        if a != b:
            nbr[fill[a]] = b
            nbr[fill[b]] = a
            if weighted:
                nw[fill[a]] = nw[fill[b]] = w[i]
            fill[a] += 1
            fill[b] += 1
    # merge repeats row by row: slot[v] = where v sits in the current row
    slot = np.full(n, -1, dtype=np.int64)
    indptr = np.zeros(n + 1, dtype=np.int64)
    pos = 0
    for u in range(n):
        row_start = pos
        for e in range(deg[u], deg[u + 1]):
            v = nbr[e]
            s = slot[v]
            if s >= row_start:
                if weighted and nw[e] > nw[s]:
                    nw[s] = nw[e]
            else:
                slot[v] = pos
                nbr[pos] = v
                if weighted:
                    nw[pos] = nw[e]
                pos += 1
        indptr[u + 1] = pos
    return indptr, nbr[:pos].copy(), nw[:pos].copy() if weighted else nw


@njit(cache=True, nogil=True)
def cut_weight(indptr, indices, data, assign):
    """Total weight of the edges between parts (each undirected edge once)."""
    total = 0.0
    for u in range(assign.shape[0]):
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            if assign[indices[e]] != a:
                total += data[e]
    return total / 2.0


@njit(cache=True, nogil=True)
def part_loads(assign, vw, num_parts):
    """``(weight [P], node count [P])`` of every part."""
    part_w = np.zeros(num_parts)
    sizes = np.zeros(num_parts, dtype=np.int64)
    for u in range(assign.shape[0]):
        part_w[assign[u]] += vw[u]
        sizes[assign[u]] += 1
    return part_w, sizes


@njit(cache=True, nogil=True)
def group_by_label(label, count):
    """Counting sort: ``members[start[c]:start[c + 1]]`` are the ids ``u`` with ``label[u] == c``, increasing."""
    n = label.shape[0]
    start = np.zeros(count + 1, dtype=np.int64)
    for u in range(n):
        start[label[u] + 1] += 1
    for c in range(count):
        start[c + 1] += start[c]
    members = np.empty(n, dtype=np.int64)
    fill = start[:-1].copy()
    for u in range(n):
        members[fill[label[u]]] = u
        fill[label[u]] += 1
    return start, members


@njit(cache=True, nogil=True)  # multilevel_refine checks the CSR on a second thread beside the start
def indptr_if_symmetric_csr(src, dst, n):
    """``(indptr, True)`` when ``(src, dst)`` lists a symmetric CSR row by row, else ``(_, False)``.

    One pass checks ids in ``[0, n)``, rows ascending, neighbours strictly ascending inside a row
    and no self loop (so no repeats) while counting the rows. A second walks the ``u < v`` entries
    in row order: their reverses ``(v, u)`` must be the leading ``u < v`` part of row ``v`` in the same
    order, so one cursor per row checks each with a single read (a binary search per entry reads
    rows out of order on a mesh numbered without locality). Equal counts of ``u < v`` and ``u > v``
    entries then make the map ``(u, v) -> (v, u)`` onto: every entry has its reverse. No ``[E]``
    temporaries.
    """
    indptr = np.zeros(n + 1, dtype=np.int64)
    below = 0
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u == v or u < 0 or v < 0 or u >= n or v >= n or \
                (i > 0 and (u < src[i - 1] or (u == src[i - 1] and v <= dst[i - 1]))):
            return indptr, False
        indptr[u + 1] += 1
        if u < v:
            below += 1
    if 2 * below != src.shape[0]:
        return indptr, False
    for u in range(n):
        indptr[u + 1] += indptr[u]
    cursor = indptr[:-1].copy()  # next entry of each row that must be a reverse
    for i in range(src.shape[0]):
        u, v = src[i], dst[i]
        if u > v:
            continue
        k = cursor[v]
        if k == indptr[v + 1] or dst[k] != u:
            return indptr, False
        cursor[v] = k + 1
    return indptr, True
