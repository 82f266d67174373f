"""Compiled (numba) coarsening of the multilevel refinement: heavy-edge matching and contraction.

:func:`match_in_parts` pairs nodes (inside parts, or across them for a hierarchy that does not depend on the
start), :func:`contract` (or :func:`contract_range`, a range of its rows, for two threads) builds the coarse
graph of a matching, and :func:`majority_parts` carries a fine partition up to the coarse nodes. Sequential with
hashed tie-breaks (:func:`~meshshard.partitioners._kernels.tiebreak.mix`): the same input and salt give the same
hierarchy. They release the GIL: the multilevel refinement coarsens on a second thread.
"""
from __future__ import annotations

import math

import numpy as np

from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.csr import group_by_label
from meshshard.partitioners._kernels.tiebreak import mix

__all__ = ['match_in_parts', 'match_range', 'match_across', 'coarse_ids', 'visit_order', 'majority_parts', 'contract',
           'contract_range']


@njit(cache=True, nogil=True)
def _coprime_stride(n):
    """The smallest integer from ``floor(0.618 n)`` up that is coprime to ``n`` (1 for ``n <= 2``).

    ``(first + i * stride) % n`` for ``i < n`` then visits every id once, spread evenly (a Weyl sequence).
    """
    if n <= 2:
        return 1
    stride = int(0.6180339887498949 * n)
    while math.gcd(stride, n) != 1:
        stride += 1
    return stride


@njit(cache=True, nogil=True)
def visit_order(n, salt, block=0):
    """The order in which :func:`match_in_parts` visits ``n`` nodes -> int64 ``[n]``, every id once.

    ``block <= 0`` (or ``>= n``): a golden-ratio stride through the ids from a salted start (a Weyl sequence). Else
    the ids fall into blocks of ``block`` consecutive ids, visited with such a stride over the blocks, and inside
    each block with such a stride over its ids: consecutive visits stay within one block, whose rows then stay in
    the cache, where a stride through all ids misses it at nearly every visit.
    """
    order = np.empty(n, dtype=np.int64)
    if block <= 0 or block >= n:
        u = np.int64(mix(0, salt) % np.uint64(max(n, 1)))
        stride = _coprime_stride(n)
        for i in range(n):
            order[i] = u
            u += stride
            if u >= n:
                u -= n
        return order
    nb = (n + block - 1) // block
    b = np.int64(mix(1, salt) % np.uint64(nb))
    b_stride = _coprime_stride(nb)
    k = 0
    for _ in range(nb):
        lo = b * block
        m = min(block, n - lo)
        j = np.int64(mix(b, salt) % np.uint64(m))
        stride = _coprime_stride(m)
        for i in range(m):
            order[k] = lo + j
            k += 1
            j += stride
            if j >= m:
                j -= m
        b += b_stride
        if b >= nb:
            b -= nb
    return order


@njit(cache=True, nogil=True)  # multilevel coarsens on a second thread
def match_in_parts(indptr, indices, data, vw, assign, max_vw, salt, unit=False):
    """Heavy-edge matching restricted to edges inside a part -> ``(cmap [n], nc, mate [n])``.

    Nodes are visited in :func:`visit_order` (a stride of about ``0.618 n`` through the ids from a salted start),
    so the visit order does not follow a sweep of the numbering;
    each unmatched node takes its unmatched neighbour in the same part over the edge of highest weight / (product
    of the two node weights): light pairs first, so clusters stay even (ties: the smaller hash), if the pair weighs
    at most ``max_vw``. Coarse node ids follow the smaller fine id of each pair (the fine graph's locality);
    every cluster lies in one part, so the coarse cut equals the fine cut. ``mate[u]``: the node matched with ``u``
    (``u`` itself when unmatched), for :func:`contract`. ``cmap`` and ``mate`` have the integer type of ``indices``.

    ``assign`` empty: match across parts (one part). ``unit``: every node and edge weighs 1 (the finest level of
    an unweighted graph), so the weights are not read; the same matching, without two reads per edge that miss
    the cache. Two threads match a large graph as :func:`match_range` of several id ranges, then
    :func:`match_across` and :func:`coarse_ids` (a different matching from this one's, along the ranges' borders).
    """
    n = vw.shape[0]
    mate = np.full(n, -1, dtype=indices.dtype)  # node ids in the type of indices (int32 from multilevel)
    match_range(indptr, indices, data, vw, assign, max_vw, salt, unit, 0, 0, n, mate)
    return coarse_ids(mate)


@njit(cache=True, inline="always")
def _best_partner(u, indptr, indices, data, vw, assign, max_vw, salt, unit, lo, hi, inside, mate):
    """``u``'s best unmatched neighbour in its part (-1: none): the edge of highest weight / (product of the two node
    weights) whose pair weighs at most ``max_vw`` (ties: the smaller hash). ``inside``: neighbours in ``[lo, hi)``,
    not yet visited (``mate`` -1); else neighbours outside it, visited and left alone (``mate[v] == v``)."""
    free = assign.shape[0] == 0
    au = 0 if free else assign[u]
    vu = 1.0 if unit else vw[u]
    best, best_w, best_h = -1, -1.0, np.uint64(0)
    for e in range(indptr[u], indptr[u + 1]):
        v = indices[e]
        if (lo <= v < hi) != inside or mate[v] != (-1 if inside else v) or v == u or (not free and assign[v] != au):
            continue
        if unit:  # the rating below is 1 for every edge
            if 2.0 > max_vw:
                continue
            w = 1.0
        else:
            vv = vw[v]
            if vu + vv > max_vw:
                continue
            w = data[e] / (vu * vv) if vu * vv > 0.0 else data[e]
        if w >= best_w:  # the hash only for a tie or better, once
            h = mix(v, salt)
            if w > best_w or h < best_h:
                best, best_w, best_h = v, w, h
    return best


@njit(cache=True, nogil=True)  # two threads match ranges of one graph at once
def match_range(indptr, indices, data, vw, assign, max_vw, salt, unit, block, lo, hi, mate):
    """:func:`match_in_parts`'s matching of the nodes ``[lo, hi)`` among themselves, written into ``mate`` (-1 where
    not yet visited): ranges that do not overlap can be matched at once by two threads (each reads and writes only
    its own range's entries of ``mate``). Visits ``lo + visit_order(hi - lo, salt, block)``."""
    # visit order: a golden-ratio stride through the ids, from a salted start. In id order, a sweep-like
    # numbering (a structured grid, lexicographically sorted points) pairs each node with its neighbour one
    # step on along the sweep: coarse graphs grow stretched and the refined cut is far worse than strided on a
    # lexicographically numbered lattice. A random order and 2-hop matching of the leftovers did worse on average
    # on the gmsh family. The cost: a few more nodes stay unmatched per level, and on a large graph the visits miss
    # the cache; strides inside blocks of ids (block > 0) keep them in the cache, for refined cuts as low as the
    # stride through all ids on meshes of 0.5-1M nodes (multilevel uses them on large levels only).
    order = visit_order(hi - lo, salt, block)
    for i in range(hi - lo):
        u = lo + order[i]
        if mate[u] >= 0:
            continue
        best = _best_partner(u, indptr, indices, data, vw, assign, max_vw, salt, unit, lo, hi, True, mate)
        mate[u] = u if best < 0 else best
        if best >= 0:
            mate[best] = u


@njit(cache=True, nogil=True)
def match_across(indptr, indices, data, vw, assign, max_vw, salt, unit, chunk, mate):
    """After :func:`match_range` of each range ``[k chunk, (k + 1) chunk)``: the nodes left unmatched take an unmatched
    neighbour in another range by the same rating (in id order: they are few, along the borders)."""
    for u in range(mate.shape[0]):
        if mate[u] != u:
            continue
        lo = u // chunk * chunk
        best = _best_partner(u, indptr, indices, data, vw, assign, max_vw, salt, unit, lo, lo + chunk, False, mate)
        if best >= 0:
            mate[u] = best
            mate[best] = u


@njit(cache=True, nogil=True)
def coarse_ids(mate):
    """``(cmap, nc, mate)`` of a matching ``mate``: coarse ids numbered in the order of each pair's first node."""
    n = mate.shape[0]
    cmap = np.full(n, -1, dtype=mate.dtype)
    nc = 0
    for u in range(n):  # ids in node order: the coarse graph keeps the fine graph's locality
        if cmap[u] < 0:
            cmap[u] = nc
            cmap[mate[u]] = nc
            nc += 1
    return cmap, nc, mate


#: majority_parts tallies in a dense ``[num_coarse, P]`` table up to this many entries (the coarsest level of a
#: V-cycle: about ``30 P`` nodes, so up to about 370 parts), one pass over the fine nodes in id order; above, it
#: groups the fine nodes by coarse node first (a dense table would grow as ``P^2``)
_DENSE_TALLY = 1 << 22


@njit(cache=True, nogil=True)
def majority_parts(to_coarse, fine, vw, num_coarse, num_parts):
    """Each coarse node's part: the one holding most of its fine nodes' weight (ties: the lowest id).

    ``to_coarse`` int64 ``[n]``: each fine node's coarse node; ``fine`` int64 ``[n]``: its part. Returns
    int64 ``[num_coarse]``. Up to ``_DENSE_TALLY`` entries ``num_coarse * P``, one pass adds the weights into a dense
    table; above, a counting sort by coarse node, then one tally per coarse node over a ``[P]`` scratch: O(n + P).
    Either way each sum adds its fine nodes in id order (the same result).
    """
    out = np.zeros(num_coarse, dtype=np.int64)
    if num_coarse * num_parts <= _DENSE_TALLY:
        table = np.zeros((num_coarse, num_parts))
        seen = np.zeros((num_coarse, num_parts), dtype=np.bool_)
        for u in range(to_coarse.shape[0]):
            c, p = to_coarse[u], fine[u]
            table[c, p] += vw[u]
            seen[c, p] = True
        for c in range(num_coarse):
            best = -1
            for p in range(num_parts):  # a part with no member never wins, even at weight 0
                if seen[c, p] and (best < 0 or table[c, p] > table[c, best]):
                    best = p
            out[c] = max(best, 0)
        return out
    start, members = group_by_label(to_coarse, num_coarse)
    w = np.zeros(num_parts)
    seen_p = np.zeros(num_parts, dtype=np.bool_)
    touched = np.empty(num_parts, dtype=np.int64)
    for c in range(num_coarse):
        nt = 0
        for k in range(start[c], start[c + 1]):
            u = members[k]
            p = fine[u]
            if not seen_p[p]:
                seen_p[p] = True
                touched[nt] = p
                nt += 1
            w[p] += vw[u]
        best = -1
        for i in range(nt):
            p = touched[i]
            if best < 0 or w[p] > w[best] or (w[p] == w[best] and p < best):
                best = p
        for i in range(nt):
            w[touched[i]] = 0.0
            seen_p[touched[i]] = False
        out[c] = max(best, 0)
    return out


@njit(cache=True, inline="always")
def _contract_rows(indptr, indices, data, vw, cmap, mate, lo, hi, c_lo, cvw, c_indptr, c_indices, c_data, slot, unit):
    """Write the coarse rows of the pairs whose first node lies in ``[lo, hi)`` (coarse nodes from ``c_lo`` on) into
    ``c_indptr[1:]`` (offsets), ``c_indices``, ``c_data`` and ``cvw``; returns the entries written. ``unit``: every
    edge weighs 1, ``data`` is not read."""
    pos = 0
    for first in range(lo, hi):
        other = mate[first]
        if other < first:  # the pair's row was written at its first node
            continue
        c = cmap[first]
        row_start = pos
        cvw[c - c_lo] = vw[first] + (vw[other] if other != first else 0.0)
        for k in range(2 if other != first else 1):
            u = first if k == 0 else other
            for e in range(indptr[u], indptr[u + 1]):
                d = cmap[indices[e]]
                if d == c:
                    continue
                w = 1.0 if unit else data[e]
                s = slot[d]
                if s >= row_start:
                    c_data[s] += w
                else:
                    slot[d] = pos
                    c_indices[pos] = d
                    c_data[pos] = w
                    pos += 1
        c_indptr[c - c_lo + 1] = pos
    return pos


@njit(cache=True, nogil=True)  # multilevel coarsens on a second thread
def contract(indptr, indices, data, vw, cmap, mate, nc, unit=False):
    """Coarse graph of a matching: summed node and edge weights, no self loops.

    ``cmap`` ``[n]``: each node's coarse node, numbered in the order of each pair's first
    node; ``mate`` ``[n]``: the node matched with each (itself when unmatched), as
    :func:`match_in_parts` returns them. Pairs are read in node order, so the coarse rows are
    written in order without sorting nodes by cluster. ``unit``: every edge weighs 1 (the finest level of an
    unweighted graph), so ``data`` is not read. Returns ``(indptr, indices, data, vw)`` of the coarse graph (``indices`` and ``data`` may be views of
    larger buffers).
    """
    cvw = np.empty(nc)
    c_indptr = np.zeros(nc + 1, dtype=np.int64)
    c_indices = np.empty(indices.shape[0], dtype=indices.dtype)  # int32 stays int32
    c_data = np.empty(indices.shape[0])
    slot = np.full(nc, -1, dtype=np.int64)  # position of coarse neighbour in the current row
    pos = _contract_rows(indptr, indices, data, vw, cmap, mate, 0, cmap.shape[0], 0, cvw, c_indptr, c_indices, c_data,
                         slot, unit)
    return c_indptr, c_indices[:pos], c_data[:pos], cvw


@njit(cache=True, nogil=True)  # the caller contracts one range while a second thread contracts the other
def contract_range(indptr, indices, data, vw, cmap, mate, nc, lo, hi, unit=False):
    """:func:`contract`'s rows of the pairs whose first node lies in ``[lo, hi)``: consecutive coarse nodes, so
    the results of consecutive ranges concatenate to the whole coarse graph (``indptr`` of each range starts at 0).
    """
    c_lo, c_hi, cap = -1, 0, 0
    for first in range(lo, hi):  # the range's coarse nodes and a bound on its entries
        other = mate[first]
        if other < first:
            continue
        if c_lo < 0:
            c_lo = cmap[first]
        c_hi = cmap[first] + 1
        cap += indptr[first + 1] - indptr[first]
        if other != first:
            cap += indptr[other + 1] - indptr[other]
    c_lo = max(c_lo, 0)
    m = max(c_hi - c_lo, 0)
    cvw = np.empty(m)
    c_indptr = np.zeros(m + 1, dtype=np.int64)
    c_indices = np.empty(cap, dtype=indices.dtype)
    c_data = np.empty(cap)
    slot = np.full(nc, -1, dtype=np.int64)
    pos = _contract_rows(indptr, indices, data, vw, cmap, mate, lo, hi, c_lo, cvw, c_indptr, c_indices, c_data, slot,
                         unit)
    return c_indptr, c_indices[:pos], c_data[:pos], cvw
