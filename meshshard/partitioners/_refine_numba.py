"""Compiled (numba) kernels of the multilevel refinement: matching, contraction, k-way FM, rebalancing, repair.

All kernels are sequential with fixed tie-breaks (a hash of the node id and a salt), so the same
input and salt give the same result. They release the GIL (``nogil=True``): the multilevel refinement
runs its first hierarchy and its further tries on threads. Graphs are symmetric CSR: ``indptr`` int64 ``[n + 1]``,
``indices`` int64 or int32 ``[nnz]`` (no self loops; the multilevel refinement passes int32, which halves what
the kernels read per edge; :func:`match_in_parts`' cluster maps and :func:`contract`'s coarse ``indices`` keep
the type), ``data`` float64 ``[nnz]`` edge weights; ``vw`` float64 ``[n]`` node weights; ``assign`` int64
``[n]`` part ids.

The per-node helpers called in the kernels' inner loops are compiled with ``inline="always"``: a call
between numba functions passes every array as a struct and counts its references, which made a
six-edge :func:`_best_move` cost 4x its inlined body (measured: 1.26 ms against 0.33 ms for 10k calls).
"""
from __future__ import annotations

import math

import numpy as np

from meshshard.partitioners._jit import njit

__all__ = ["build_csr", "match_in_parts", "part_loads", "group_by_label", "majority_parts", "contract", "contract_range", "boundary_candidates",
           "project_candidates", "candidate_cut", "fm_refine", "quotient_graph", "rebalance", "label_components", "label_components_edges", "repair_components", "cut_weight", "grow_parts"]

_M1 = np.uint64(0x9E3779B97F4A7C15)
_M2 = np.uint64(0xBF58476D1CE4E5B9)
_M3 = np.uint64(0x94D049BB133111EB)


#: fm_refine keeps rows of each rated node's edge weight to every part (float64 + int32, ``P`` each, in the order of
#: first rating) up to this many entries ``n * P``; above, it tallies each node's edges per rating. Measured on the FM
#: calls of the saved gmsh family (2 shared cores, 7 parts) when the rows sat at the node ids (``[n, P]``): 0.85x the
#: tallies' time at ~10k nodes, but 1.09x at ~100k when every level had them (8.4 MB of rows read at random), so the
#: bound was 2**17 (~10k nodes at 7 parts). In first-rating order the rows a pass reads lie together; measured
#: (28 Nov 2026, saved family, time / METIS's summed over the meshes, two processes each) 2**21 against 2**17: ~100k
#: with two threads kdtree 0.570, 0.581 against 0.624, 0.615, hilbert 0.598, 0.628 against 0.680, 0.677, with one
#: thread within the noise; the 2M-node lattice (best of 2, two processes) kdtree 0.80, 0.52 against 0.74, 0.55,
#: hilbert 0.48, 0.48 against 0.52, 0.59; the same partitions
_ROW_ENTRIES = 1 << 21


@njit(cache=True, inline="always")
def _mix(x, salt):
    """splitmix64 of ``x`` and ``salt`` (uint64): the deterministic tie-break."""
    z = np.uint64(x) * _M1 + np.uint64(salt) * _M3 + _M1
    z = (z ^ (z >> np.uint64(30))) * _M2
    z = (z ^ (z >> np.uint64(27))) * _M3
    return z ^ (z >> np.uint64(31))


@njit(cache=True, nogil=True)
def build_csr(src, dst, w, n):
    """Symmetric CSR of the undirected graph of edges ``src[i] - dst[i]`` (either or both directions given).

    Self loops are dropped; an edge given several times keeps its largest weight. Returns
    ``(indptr, indices, data)``; neighbours are in input order, not sorted. ``w`` empty: the graph is
    unweighted, and ``data`` is empty too (no ``[nnz]`` weights are built: on the 2M-node hex lattice they
    were most of the refinement's peak memory).
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


@njit(cache=True, nogil=True)  # multilevel coarsens on a second thread
def match_in_parts(indptr, indices, data, vw, assign, max_vw, salt, unit=False):
    """Heavy-edge matching restricted to edges inside a part -> ``(cmap [n], nc, mate [n])``.

    Nodes are visited with a stride of about ``0.618 n`` through the ids (every id once) from a salted
    start, so the visit order does not follow a sweep of the numbering; each unmatched node takes its
    unmatched neighbour in the same part over the edge of highest weight / (product of the two node
    weights): light pairs first, so clusters stay even (ties: the smaller hash), if the pair weighs at
    most ``max_vw``. Coarse node ids follow the smaller fine id of each pair (the fine graph's locality);
    every cluster lies in one part, so the coarse cut equals the fine cut. ``mate[u]``: the node matched with ``u``
    (``u`` itself when unmatched), for :func:`contract`. ``cmap`` and ``mate`` have the integer type of ``indices``.

    ``assign`` empty: match across parts (one part). ``unit``: every node and edge weighs 1 (the finest level of
    an unweighted graph), so the weights are not read; the same matching, without two reads per edge that miss
    the cache (measured at ~100k nodes: 10-20% less time on the finest level).
    """
    n = vw.shape[0]
    free = assign.shape[0] == 0
    # visit order: a golden-ratio stride through the ids, from a salted start. In id order, a sweep-like
    # numbering (a structured grid, lexicographically sorted points) pairs each node with its neighbour one
    # step on along the sweep: coarse graphs grow stretched, and on a 512k-node hex lattice the refined cut
    # was 1.13-1.27x METIS's against 0.93-1.05x strided. On saved copies of the gmsh family (14 meshes x
    # kdtree / hilbert / morton x seeds 0-5) the mean cut / METIS's went 0.996 -> 0.978 numbered
    # lexicographically, 0.989 -> 0.994 in gmsh's own numbering (on which the constants were tuned); a
    # random order, blocks of 4 or 16 ids and 2-hop matching of the leftovers all did worse on average.
    # Cost: ~8% of nodes stay unmatched per level (0.54 nodes per node after it against 0.50), ~5% more
    # time at ~10k nodes and 4-7% at ~100k (kdtree, alternating runs); the visits miss the cache, so this kernel
    # alone takes 31 ms on the finest level of the ~100k vessel against 9 ms in id order. Blocks of 512 ids
    # (a stride inside each) took ~15% off the time at ~100k but cut a 48x24x12 lattice numbered axis by axis
    # 1.13x METIS's (hilbert, seed 0; the lattice test's bound is 1.06x). Ties between equal edges: the smaller hash.
    first = np.int64(_mix(0, salt) % np.uint64(max(n, 1)))
    stride = _coprime_stride(n)
    mate = np.full(n, -1, dtype=indices.dtype)  # node ids in the type of indices (int32 from multilevel)
    u = first
    for i in range(n):
        if i > 0:
            u += stride
            if u >= n:
                u -= n
        if mate[u] >= 0:
            continue
        best, best_w, best_h = -1, -1.0, np.uint64(0)
        au = 0 if free else assign[u]
        vu = 1.0 if unit else vw[u]
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if mate[v] >= 0 or v == u or (not free and assign[v] != au):
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
            if w >= best_w:  # the hash only for a tie or better, once (~0.89x the kernel's time at ~10k nodes)
                h = _mix(v, salt)
                if w > best_w or h < best_h:
                    best, best_w, best_h = v, w, h
        if best >= 0:
            mate[u] = best
            mate[best] = u
        else:
            mate[u] = u
    cmap = np.full(n, -1, dtype=indices.dtype)
    nc = 0
    for u in range(n):  # ids in node order: the coarse graph keeps the fine graph's locality
        if cmap[u] < 0:
            cmap[u] = nc
            cmap[mate[u]] = nc
            nc += 1
    return cmap, nc, mate


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


@njit(cache=True, nogil=True)
def majority_parts(to_coarse, fine, vw, num_coarse, num_parts):
    """Each coarse node's part: the one holding most of its fine nodes' weight (ties: the lowest id).

    ``to_coarse`` int64 ``[n]``: each fine node's coarse node; ``fine`` int64 ``[n]``: its part. Returns
    int64 ``[num_coarse]``. Counting sort by coarse node, then one tally per coarse node over a
    ``[P]`` scratch: O(n + P), where a dense ``[num_coarse, P]`` table would grow as P^2.
    """
    start, members = group_by_label(to_coarse, num_coarse)
    out = np.zeros(num_coarse, dtype=np.int64)
    w = np.zeros(num_parts)
    seen = np.zeros(num_parts, dtype=np.bool_)
    touched = np.empty(num_parts, dtype=np.int64)
    for c in range(num_coarse):
        nt = 0
        for k in range(start[c], start[c + 1]):
            u = members[k]
            p = fine[u]
            if not seen[p]:
                seen[p] = True
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
            seen[touched[i]] = False
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
    unweighted graph), so ``data`` is not read (measured: 0.82-0.88x the time on the finest level of ~10k family
    meshes). Returns ``(indptr, indices, data, vw)`` of the coarse graph (``indices`` and ``data`` may be views of
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


@njit(cache=True, inline="always")
def _tally(u, indptr, indices, data, assign, conn, touched):
    """Edge weight from ``u`` to each neighbouring part into ``conn`` (entries at -1 = "not listed"),
    the parts listed in ``touched[:nt]``; returns ``nt``. The caller resets ``conn`` to -1 after."""
    nt = 0
    for e in range(indptr[u], indptr[u + 1]):
        p = assign[indices[e]]
        if conn[p] < 0.0:
            conn[p] = 0.0
            touched[nt] = p
            nt += 1
        conn[p] += data[e]
    return nt


@njit(cache=True, inline="always")
def _untally(conn, touched, nt):
    """Reset the entries :func:`_tally` listed in ``touched[:nt]`` to -1 ("not listed")."""
    for i in range(nt):
        conn[touched[i]] = -1.0


@njit(cache=True, inline="always")
def _feasible_target(u, own, vw, part_w, max_w, conn, touched, nt):
    """Among the parts ``touched[:nt]`` tallied in ``conn``, the one other than ``own`` with the most edge
    weight to ``u`` that stays within ``max_w`` with ``u`` (ties: the lighter, then the lower id) -> ``(part or -1,
    weight)``."""
    best, best_c = -1, -1.0
    for i in range(nt):
        p = touched[i]
        if p == own or part_w[p] + vw[u] > max_w:
            continue
        c = conn[p]
        # ties: the lighter part, then the lower id, an order of the parts alone (fm_refine's rows list the parts in
        # part order, a tally in edge order); written out: an inlined helper for it cost 15% of fm_refine's time
        if c > best_c or (c == best_c and (part_w[p] < part_w[best] or (part_w[p] == part_w[best] and p < best))):
            best, best_c = p, c
    return best, best_c


@njit(cache=True, inline="always")
def _scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched):
    """Best feasible move of ``u``, the weight of its cut edges and whether it is on the boundary, from one
    tally of its row -> ``(gain, target, cut weight, boundary)``; target -1 when there is no move (or ``u``
    is interior).

    The target is the neighbouring part with the most edge weight to ``u`` among those that stay
    within ``max_w`` with ``u``; ties go to the lighter part. ``conn`` (float64 ``[P]``, all -1:
    "not listed", so zero-weight edges still list their part once) and ``touched`` are scratch.
    """
    own = assign[u]
    nt = _tally(u, indptr, indices, data, assign, conn, touched)
    out = 0.0
    for i in range(nt):
        if touched[i] != own:
            out += conn[touched[i]]
    best, best_c = _feasible_target(u, own, vw, part_w, max_w, conn, touched, nt)
    gain = best_c - max(conn[own], 0.0)
    boundary = nt > 1 or (nt == 1 and touched[0] != own)
    _untally(conn, touched, nt)
    return gain, best, out, boundary


@njit(cache=True, inline="always")
def _best_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched):
    """:func:`_scan_move`'s ``(gain, target)``."""
    gain, best, _, _ = _scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
    return gain, best


@njit(cache=True, inline="always")
def _fill_row(u, r, indptr, indices, data, assign, row_w, row_n):
    """Tally ``u``'s edges into row ``r`` of ``row_w`` (edge weight to each part, in edge order as :func:`_tally`)
    and ``row_n`` (edge count to each part)."""
    for p in range(row_w.shape[1]):
        row_w[r, p] = 0.0
        row_n[r, p] = 0
    for e in range(indptr[u], indptr[u + 1]):
        p = assign[indices[e]]
        row_w[r, p] += data[e]
        row_n[r, p] += 1


@njit(cache=True, inline="always")
def _row_move(r, own, wu, part_w, max_w, row_w, row_n):
    """:func:`_scan_move` of a node (in part ``own``, of weight ``wu``) from its rows ``r`` (see :func:`_fm_passes`):
    P numbers, not its edges."""
    best, best_c = -1, -1.0
    out = 0.0
    boundary = False
    for p in range(row_w.shape[1]):
        if p == own or row_n[r, p] == 0:
            continue
        boundary = True
        c = row_w[r, p]
        out += c
        if part_w[p] + wu <= max_w and (c > best_c or (c == best_c and (part_w[p] < part_w[best] or (
                part_w[p] == part_w[best] and p < best)))):
            best, best_c = p, c
    return best_c - max(row_w[r, own], 0.0), best, out, boundary


@njit(cache=True, inline="always")
def _shift_row(r, w, src, t, row_w, row_n):
    """A neighbour of the node of rows ``r`` over an edge of weight ``w`` moved from ``src`` to ``t``: the rows
    follow (a count back at 0 zeroes the weight: float weights leave no residue)."""
    row_n[r, src] -= 1
    row_w[r, src] = row_w[r, src] - w if row_n[r, src] else 0.0
    row_n[r, t] += 1
    row_w[r, t] += w


@njit(cache=True, inline="always")
def _shift_rows(u, src, t, indptr, indices, data, slot, row_w, row_n):
    """``u`` moved from ``src`` to ``t``: its neighbours' rows (``slot[v]``, -1 for none) follow."""
    for e in range(indptr[u], indptr[u + 1]):
        r = slot[indices[e]]
        if r >= 0:
            _shift_row(r, data[e], src, t, row_w, row_n)


@njit(cache=True, inline="always")
def _rise(hk, ht, hn, i, k, t, u):
    """Put ``(k, t) -> u`` into the hole at ``i`` of a binary max-heap, moving it up past smaller parents."""
    while i > 0:
        parent = (i - 1) >> 1
        if hk[parent] > k or (hk[parent] == k and ht[parent] >= t):
            break
        hk[i], ht[i], hn[i] = hk[parent], ht[parent], hn[parent]
        i = parent
    hk[i], ht[i], hn[i] = k, t, u


@njit(cache=True, inline="always")
def _push(hk, ht, hn, size, k, t, u):
    """Push ``(k, t) -> u`` on a binary max-heap; returns the new size.

    A full heap drops the entry: the heap only proposes moves (each is re-evaluated when popped),
    and the capacity (``n + nnz``, every push a pass can make) is never reached in practice.
    """
    if size == hk.shape[0]:
        return size
    _rise(hk, ht, hn, size, k, t, u)
    return size + 1


@njit(cache=True, inline="always")
def _pop(hk, ht, hn, size):
    """Remove the top of the heap; returns ``(k, u, new size)``.

    Bottom-up: the hole at the top goes down along the larger children to a leaf, then the last entry rises
    from there (one comparison per level on the way down instead of two; the same entries pop in the same
    order; measured: 0.96x fm_refine's time on the ~10k family)."""
    k, u = hk[0], hn[0]
    size -= 1
    lk, lt, ln = hk[size], ht[size], hn[size]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and (hk[c + 1] > hk[c] or (hk[c + 1] == hk[c] and ht[c + 1] > ht[c])):
            c += 1
        hk[i], ht[i], hn[i] = hk[c], ht[c], hn[c]
        i = c
    _rise(hk, ht, hn, i, lk, lt, ln)
    return k, u, size


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
def _list_around(u, indptr, indices, listed, cand, nc):
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


@njit(cache=True, inline="always")
def _other_parts(u, indptr, indices, assign):
    """The parts of ``u``'s neighbours other than its own, as a bit mask (``P <= 64``)."""
    own = assign[u]
    mask = np.uint64(0)
    for e in range(indptr[u], indptr[u + 1]):
        p = assign[indices[e]]
        if p != own:
            mask |= np.uint64(1) << np.uint64(p)
    return mask


@njit(cache=True, inline="always")
def _room_in(k, no_room, wu, part_w, max_w):
    """Whether a part of the mask ``no_room[k]`` (see :func:`_other_parts`) has room for a node of weight ``wu``; True
    without masks."""
    if no_room.shape[0] == 0:
        return True
    mask = no_room[k]
    p = 0
    while mask:
        if mask & np.uint64(1) and part_w[p] + wu <= max_w:
            return True
        mask >>= np.uint64(1)
        p += 1
    return False


@njit(cache=True, nogil=True)
def fm_refine(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit, min_gain, salt, listed, cand,
              count):
    """k-way Fiduccia-Mattheyses passes with a gain heap and rollback to the best prefix. Modifies ``assign``.

    Each pass puts every boundary node on a max-heap keyed by the gain of its best feasible move
    (target part stays within ``max_w``; a part never empties; a node whose neighbourhood no kept move
    touched keeps the previous pass's rating), then repeatedly moves the top
    node (gains are recomputed when popped, stale entries re-queued), locks it and re-queues its
    neighbours, accepting negative gains (hill climbing) until ``stall_limit`` moves pass without
    a new best; the moves after the best prefix are undone. Passes repeat while one removes more
    than ``min_gain`` times the cut it started from. ``listed, cand, count`` (see
    :func:`boundary_candidates`): a superset of the boundary nodes, which a pass scans instead of all n;
    kept a superset (the nodes next to kept moves join it).

    Up to ``_ROW_ENTRIES`` entries ``n * P``, the ratings come from rows of each node's edge weight to every part,
    kept up to date as nodes move, else from a tally of the node's edges (:func:`_fm_passes`; the same partition).

    Returns the cut weight after the passes (counted in the first pass, then lowered by each pass's
    kept gain; recounted only when ``max_passes < 1``).
    """
    n = assign.shape[0]
    if n * num_parts <= _ROW_ENTRIES:
        return _fm_passes(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit, min_gain, salt,
                          listed, cand, count, np.empty((0, 0)))
    return _fm_passes(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit, min_gain, salt,
                      listed, cand, count, np.empty(0))


@njit(cache=True, nogil=True)
def _fm_passes(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit, min_gain, salt, listed,
               cand, count, rows):
    """:func:`fm_refine`'s passes. ``rows`` 2-D (any shape): each node rated keeps rows of its edge weight and edge
    count to every part (float64 and int32 ``[n, P]``; node ``u``'s are row ``slot[u]``, handed out in the order of
    first rating), updated as its neighbours move (the rollback included), so
    rating it again reads P numbers instead of its edges; the moves' neighbours, re-rated after every move, are
    most of the ratings. ``rows`` 1-D: every rating tallies the node's edges. The two are separate compilations
    (``rows.ndim`` is a constant to numba, which drops the other branch: a run-time switch between them made the
    tally kernel ~1.4x slower), and they rate every node alike, so they return the same partition for integer
    weights (for float weights the rows' sums may differ in the last bits; tests/partitioners/test_refine.py checks
    it). Measured: see ``_ROW_ENTRIES``. The
    "fill the row if missing, then rate from it" steps are written out at each rating: as one inlined helper (a
    branch inside) they made the passes 1.3x slower, and 1.57x in a second measurement (replayed FM calls of the
    ~10k family, 28 Nov 2026)."""
    n = assign.shape[0]
    row_w = np.empty((n if rows.ndim == 2 else 0, num_parts))
    row_n = np.empty((row_w.shape[0], num_parts), dtype=np.int32)
    part_w, sizes = part_loads(assign, vw, num_parts)
    conn = np.full(num_parts, -1.0)
    touched = np.empty(num_parts, dtype=np.int64)
    locked = np.zeros(n, dtype=np.bool_)
    log_node = np.empty(n, dtype=np.int64)
    log_from = np.empty(n, dtype=np.int64)
    cap = n + indices.shape[0]
    hk, ht, hn = np.empty(cap), np.empty(cap, dtype=np.uint64), np.empty(cap, dtype=np.int64)
    nc = count[0]
    # a node's best move changes only when a neighbour (or the node) changes part; between passes the others
    # keep their rating from the pass before (a part's room is re-checked when the node is popped)
    dirty = np.ones(n, dtype=np.bool_)
    # the rows of the nodes rated so far, in the order of their first rating, and with them the ratings (by node id
    # without rows): a pass on ~10k nodes rates a fraction of them, and arrays indexed by node id spread those over
    # most of their pages, each a page fault (~3 us here; malloc gives the memory back to the system between calls).
    # Measured on the saved ~10k family, one thread: fm_refine's page faults 392 -> 175 per partition, the same
    # partitions, time / METIS's (sum over the meshes, three processes each) 0.994-1.008 -> 0.969-0.998 (kdtree),
    # 1.084-1.090 -> 1.066-1.089 (hilbert); with two threads no change beyond the noise
    slot = np.full(row_w.shape[0], -1, dtype=np.int32)
    used = 0
    gain_c = np.empty(n)
    tgt_c = np.empty(n, dtype=np.int64)
    # a node with no feasible move is re-rated only once one of its neighbouring parts has room for it
    # (up to 64 parts: those parts as a bit mask, written with tgt_c < 0; more: re-rated every pass)
    no_room = np.empty(n if num_parts <= 64 else 0, dtype=np.uint64)
    cut = 0.0  # twice the cut: every cut edge is counted from both ends
    for pass_ in range(max_passes):
        s = np.uint64(salt) * np.uint64(1009) + np.uint64(pass_)
        size = 0
        kept = 0
        for i in range(nc):
            u = cand[i]
            k = u
            if rows.ndim == 2:
                k = slot[u]
                if k < 0:  # never rated, so dirty
                    k = slot[u] = used
                    used += 1
                    _fill_row(u, k, indptr, indices, data, assign, row_w, row_n)
            if dirty[u] or (tgt_c[k] < 0 and _room_in(k, no_room, vw[u], part_w, max_w)):
                dirty[u] = False
                if rows.ndim == 2:
                    g, t, out, boundary = _row_move(k, assign[u], vw[u], part_w, max_w, row_w, row_n)
                else:
                    g, t, out, boundary = _scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
                if not boundary:
                    listed[u] = False
                    continue
                if pass_ == 0:
                    cut += out
                gain_c[k] = g
                tgt_c[k] = t
                if t < 0 and no_room.shape[0]:
                    no_room[k] = _other_parts(u, indptr, indices, assign)
            cand[kept] = u
            kept += 1
            if tgt_c[k] >= 0:
                size = _push(hk, ht, hn, size, gain_c[k], _mix(u, s), u)
        nc = kept
        nmoves, best_len, cum, best_cum = 0, 0, 0.0, 0.0
        while size > 0:
            g, u, size = _pop(hk, ht, hn, size)
            if locked[u]:
                continue
            src = assign[u]
            if sizes[src] <= 1:
                continue
            if rows.ndim == 2:
                r = slot[u]
                if r < 0:
                    r = slot[u] = used
                    used += 1
                    _fill_row(u, r, indptr, indices, data, assign, row_w, row_n)
                g2, t, _, _ = _row_move(r, src, vw[u], part_w, max_w, row_w, row_n)
            else:
                g2, t = _best_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
            if t < 0:
                continue
            if g2 != g:  # stale entry (a neighbour moved or a part filled up): queue the fresh gain
                size = _push(hk, ht, hn, size, g2, _mix(u, s), u)
                continue
            assign[u] = t
            part_w[src] -= vw[u]
            part_w[t] += vw[u]
            sizes[src] -= 1
            sizes[t] += 1
            locked[u] = True
            log_node[nmoves] = u
            log_from[nmoves] = src
            nmoves += 1
            cum += g2
            if cum > best_cum + 1e-9:
                best_cum, best_len = cum, nmoves
            elif nmoves - best_len >= stall_limit:
                if rows.ndim == 2:
                    _shift_rows(u, src, t, indptr, indices, data, slot, row_w, row_n)
                break
            src_before = part_w[src] + vw[u]
            # one walk over u's edges shifts each neighbour's rows, then re-rates it (a walk for each: 1.05x
            # fm_refine's time)
            for e in range(indptr[u], indptr[u + 1]):
                v = indices[e]
                if rows.ndim == 2 and slot[v] >= 0:
                    _shift_row(slot[v], data[e], src, t, row_w, row_n)
                # a node of t only lost gain (its queued entry is re-rated when popped) unless src, too full
                # for it before, now has room
                if not locked[v] and (assign[v] != t or src_before + vw[v] > max_w):
                    if rows.ndim == 2:
                        r = slot[v]
                        if r < 0:
                            r = slot[v] = used
                            used += 1
                            _fill_row(v, r, indptr, indices, data, assign, row_w, row_n)
                        gv, tv, _, _ = _row_move(r, assign[v], vw[v], part_w, max_w, row_w, row_n)
                    else:
                        gv, tv = _best_move(v, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
                    if tv >= 0:
                        size = _push(hk, ht, hn, size, gv, _mix(v, s), v)
        for i in range(nmoves - 1, best_len - 1, -1):  # roll back past the best prefix
            u, src = log_node[i], log_from[i]
            t = assign[u]
            assign[u] = src
            if rows.ndim == 2:
                _shift_rows(u, t, src, indptr, indices, data, slot, row_w, row_n)
            part_w[t] -= vw[u]
            part_w[src] += vw[u]
            sizes[t] -= 1
            sizes[src] += 1
        for i in range(best_len):  # the kept moves may have made their neighbours boundary nodes
            u = log_node[i]
            nc = _list_around(u, indptr, indices, listed, cand, nc)
            dirty[u] = True
            for e in range(indptr[u], indptr[u + 1]):
                dirty[indices[e]] = True
        for i in range(nmoves):
            locked[log_node[i]] = False
        last = best_cum <= min_gain * 0.5 * cut + 1e-9
        cut -= 2.0 * best_cum
        if last:
            break
    count[0] = nc
    if max_passes < 1:
        return candidate_cut(indptr, indices, data, assign, cand, nc)
    return 0.5 * cut


@njit(cache=True, nogil=True)
def quotient_graph(indptr, indices, assign, num_parts, cand, nc):
    """Parts adjacent across a cut edge, as CSR over parts ``(q_indptr [P + 1], q_indices)``; ``cand[:nc]``
    holds every boundary node."""
    m = 0
    for i in range(nc):
        m += indptr[cand[i] + 1] - indptr[cand[i]]
    keys = np.empty(m, dtype=np.int64)
    m = 0
    for i in range(nc):
        u = cand[i]
        a = assign[u]
        for e in range(indptr[u], indptr[u + 1]):
            b = assign[indices[e]]
            if b != a:
                keys[m] = a * num_parts + b
                m += 1
    keys = np.unique(keys[:m])
    q_indptr = np.zeros(num_parts + 1, dtype=np.int64)
    q_indices = np.empty(keys.shape[0], dtype=np.int64)
    for i in range(keys.shape[0]):
        q_indptr[keys[i] // num_parts + 1] += 1
        q_indices[i] = keys[i] % num_parts
    for p in range(num_parts):
        q_indptr[p + 1] += q_indptr[p]
    return q_indptr, q_indices


@njit(cache=True, nogil=True)
def _room_distance(q_indptr, q_indices, part_w, max_w, min_vw, dist, queue):
    """Fill ``dist`` (int64 ``[P]``) with the hops in the quotient graph from each part to the
    nearest part with room for a node of weight ``min_vw`` within ``max_w`` (0 for those; ``P``
    where none is reachable). ``queue`` (int64 ``[P]``) is scratch."""
    num_parts = part_w.shape[0]
    head, tail = 0, 0
    for p in range(num_parts):
        if part_w[p] + min_vw <= max_w:
            dist[p] = 0
            queue[tail] = p
            tail += 1
        else:
            dist[p] = num_parts
    while head < tail:  # breadth-first from every part with room
        p = queue[head]
        head += 1
        for i in range(q_indptr[p], q_indptr[p + 1]):
            q = q_indices[i]
            if dist[q] > dist[p] + 1:
                dist[q] = dist[p] + 1
                queue[tail] = q
                tail += 1


@njit(cache=True, inline="always")
def _rebalance_move(u, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched):
    """Best move of ``u`` out of its overweight part: into a part with room if any, else into a
    part nearer to room (``dist``) that ends no heavier than the source was at the round's start
    (``start_w``), so the whole excess flows a hop a round through full parts towards room and never back.
    The first choice is :func:`_best_move`'s; both come from one tally of ``u``'s row."""
    own = assign[u]
    nt = _tally(u, indptr, indices, data, assign, conn, touched)
    best, best_c = _feasible_target(u, own, vw, part_w, max_w, conn, touched, nt)
    if best < 0:
        for i in range(nt):
            p = touched[i]
            if p == own or dist[p] >= dist[own] or part_w[p] + vw[u] > start_w[own]:
                continue
            c = conn[p]
            if c > best_c or (c == best_c and (part_w[p] < part_w[best] or (part_w[p] == part_w[best] and p < best))):
                best, best_c = p, c
    gain = best_c - max(conn[own], 0.0)
    _untally(conn, touched, nt)
    return gain, best


@njit(cache=True, inline="always")
def _any_over(part_w, max_w):
    """True when some part weighs more than ``max_w``."""
    for p in range(part_w.shape[0]):
        if part_w[p] > max_w:
            return True
    return False


@njit(cache=True, nogil=True)
def rebalance(indptr, indices, data, vw, assign, num_parts, max_w, salt, max_rounds, listed, cand, count, q_indptr,
              q_indices):
    """Move boundary nodes out of parts heavier than ``max_w``, cheapest cut increase first. Modifies ``assign``.

    A target is a neighbouring part with room, or else one a hop nearer (across part boundaries)
    to a part with room that ends no heavier than the source was; the excess so passes on, round
    after round, until it reaches a part with room. ``max_rounds`` caps the rounds (-1: ``4 P + 16``; a
    coarse level, whose heavy nodes seldom fit exactly, stops early and leaves the rest to the finer
    levels). A round scans the candidates ``listed, cand, count`` (see :func:`boundary_candidates`),
    which the nodes next to moves join. ``q_indptr, q_indices``: which parts are adjacent (see
    :func:`quotient_graph`; a coarser level's serves, as moves seldom join new parts, and is rebuilt
    from this graph if a round moves nothing), or empty to build it from this graph when a part is
    over. Returns True when every part ends within ``max_w``.
    """
    n = assign.shape[0]
    part_w, sizes = part_loads(assign, vw, num_parts)
    conn = np.full(num_parts, -1.0)
    touched = np.empty(num_parts, dtype=np.int64)
    dist = np.empty(num_parts, dtype=np.int64)
    queue = np.empty(num_parts, dtype=np.int64)
    min_vw = np.inf
    for u in range(n):
        if 0.0 < vw[u] < min_vw:
            min_vw = vw[u]
    hk, ht, hn = np.empty(0), np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.int64)
    nc = count[0]
    given_q = q_indptr.shape[0] > 0
    # passing excess on takes about one round per part it crosses, more where the parts on its way are full to
    # within a node (527k-node channel, 7 parts: one node over needed 23-30 rounds, and 2 P + 8 = 22 threw the
    # whole V-cycle away)
    for round_ in range(4 * num_parts + 16 if max_rounds < 0 else max_rounds):
        if not _any_over(part_w, max_w):
            count[0] = nc
            return True
        if hk.shape[0] == 0:  # allocated only when some part is over
            cap = n + indices.shape[0]
            hk, ht, hn = np.empty(cap), np.empty(cap, dtype=np.uint64), np.empty(cap, dtype=np.int64)
            if q_indptr.shape[0] == 0:  # moves seldom join new parts: the quotient graph of the start guides every round
                q_indptr, q_indices = quotient_graph(indptr, indices, assign, num_parts, cand, nc)
        _room_distance(q_indptr, q_indices, part_w, max_w, min_vw, dist, queue)
        start_w = part_w.copy()
        s = np.uint64(salt) * np.uint64(7919) + np.uint64(round_)
        size = 0
        for i in range(nc):
            u = cand[i]
            src = assign[u]
            if part_w[src] <= max_w or vw[u] == 0.0:
                continue
            g, t = _rebalance_move(u, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched)
            if t >= 0:
                size = _push(hk, ht, hn, size, g, _mix(u, s), u)
        moved = 0
        while size > 0:
            g, u, size = _pop(hk, ht, hn, size)
            src = assign[u]
            if part_w[src] <= max_w or sizes[src] <= 1:
                continue
            g2, t = _rebalance_move(u, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched)
            if t < 0:
                continue
            if g2 != g:
                size = _push(hk, ht, hn, size, g2, _mix(u, s), u)
                continue
            assign[u] = t
            part_w[src] -= vw[u]
            part_w[t] += vw[u]
            sizes[src] -= 1
            sizes[t] += 1
            moved += 1
            nc = _list_around(u, indptr, indices, listed, cand, nc)
            if part_w[src] <= max_w and not _any_over(part_w, max_w):
                break  # only a move out of a part above the bound comes next: none is left
            for e in range(indptr[u], indptr[u + 1]):  # the move exposed new boundary nodes of src
                v = indices[e]
                if assign[v] == src and part_w[src] > max_w and vw[v] > 0.0:
                    gv, tv = _rebalance_move(v, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched)
                    if tv >= 0:
                        size = _push(hk, ht, hn, size, gv, _mix(v, s), v)
        if moved == 0:
            if given_q:  # a coarser level's adjacency may route the excess where no boundary leads now
                q_indptr, q_indices = quotient_graph(indptr, indices, assign, num_parts, cand, nc)
                given_q = False
                continue
            break
    count[0] = nc
    return not _any_over(part_w, max_w)


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
    search order (measured: about 2x faster on a 114k-node tet mesh numbered without locality).
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


@njit(cache=True, inline="always")
def _best_frontier_node(p, vw, out, part_w, max_w, ent_node, ent_w, ent_next, head, salt):
    """Part ``p``'s unassigned frontier node with the most edge weight to it that keeps it within ``max_w``
    -> ``(node, weight, hash)`` (node -1: none); unlinks the entries of nodes assigned since.

    A node's latest entry on ``p``'s list holds its edge weight to ``p``; an older one (``p`` listed it
    again after another part did) holds less, so the maximum over entries is the node's own."""
    best, best_c, best_h = -1, -1.0, np.uint64(0)
    prev, i = -1, head[p]
    while i >= 0:
        u, nxt = ent_node[i], ent_next[i]
        if out[u] >= 0:
            if prev < 0:
                head[p] = nxt
            else:
                ent_next[prev] = nxt
            i = nxt
            continue
        c = ent_w[i]
        if c >= best_c and part_w[p] + vw[u] <= max_w:
            h = _mix(u, salt)
            if c > best_c or h < best_h:
                best, best_c, best_h = u, c, h
        prev, i = i, nxt
    return best, best_c, best_h


@njit(cache=True, inline="always")
def _grow_into(u, p, indptr, indices, data, vw, out, part_w, last_listed, latest, ent_node, ent_w, ent_next, head, m):
    """Give ``u`` to part ``p`` and update ``p``'s frontier: a neighbour ``p`` listed last gains the edge's
    weight in its latest entry (``latest``), any other gets a new entry (from ``m`` on) with its whole
    edge weight to ``p``; returns the new entry count."""
    out[u] = p
    part_w[p] += vw[u]
    for e in range(indptr[u], indptr[u + 1]):
        v = indices[e]
        if out[v] >= 0:
            continue
        if last_listed[v] == p:
            ent_w[latest[v]] += data[e]
            continue
        c = 0.0
        for f in range(indptr[v], indptr[v + 1]):
            if out[indices[f]] == p:
                c += data[f]
        last_listed[v] = p
        latest[v] = m
        ent_node[m], ent_w[m], ent_next[m] = v, c, head[p]
        head[p] = m
        m += 1
    return m


@njit(cache=True, nogil=True)
def grow_parts(indptr, indices, data, vw, assign, num_parts, max_w, salt):
    """Regrow the parts of ``assign`` from one seed each by greedy graph growing -> new int64 ``[n]``.

    Each part's seed is its node deepest inside it (most hops from the part's boundary). All parts
    grow at once, the lightest first, each by its unassigned neighbour with the most edge weight to
    it, while the part stays within ``max_w``; nodes no part could take join their lightest neighbouring part (or
    part 0 if isolated). The parts so follow the graph rather than the coordinates; the result
    may exceed ``max_w`` (rebalance it).
    """
    n = assign.shape[0]
    depth = np.full(n, -1, dtype=np.int64)
    queue = np.empty(n, dtype=np.int64)
    head, tail = 0, 0
    for u in range(n):  # breadth-first inwards from every part's boundary
        for e in range(indptr[u], indptr[u + 1]):
            if assign[indices[e]] != assign[u]:
                depth[u] = 0
                queue[tail] = u
                tail += 1
                break
    while head < tail:
        u = queue[head]
        head += 1
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if depth[v] < 0 and assign[v] == assign[u]:
                depth[v] = depth[u] + 1
                queue[tail] = v
                tail += 1
    seed = np.full(num_parts, -1, dtype=np.int64)
    for u in range(n):
        p = assign[u]
        if seed[p] < 0 or depth[u] > depth[seed[p]]:  # (depth -1: a part without boundary)
            seed[p] = u
    out = np.full(n, -1, dtype=np.int64)
    part_w = np.zeros(num_parts)
    # each part's frontier: a linked list of the unassigned nodes next to it (entries of assigned
    # nodes are dropped when met); every assignment lists at most its degree of entries, so nnz bound them
    cap = indices.shape[0] + 1
    ent_node = np.empty(cap, dtype=np.int64)
    ent_w = np.empty(cap)
    ent_next = np.empty(cap, dtype=np.int64)
    head = np.full(num_parts, -1, dtype=np.int64)
    last_listed = np.full(n, -1, dtype=np.int64)  # the part that listed a node last (skips most repeats)
    latest = np.empty(n, dtype=np.int64)  # that entry
    active = np.zeros(num_parts, dtype=np.bool_)
    m = 0
    for p in range(num_parts):
        u = seed[p]
        if u >= 0 and out[u] < 0:
            active[p] = True
            m = _grow_into(u, p, indptr, indices, data, vw, out, part_w, last_listed, latest, ent_node, ent_w, ent_next, head, m)
    while True:
        min_w = np.inf  # the lightest parts that can still grow; of those, the one with the best-connected candidate
        for q in range(num_parts):
            if active[q] and part_w[q] < min_w:
                min_w = part_w[q]
        if min_w == np.inf:
            break
        p, best, best_c, best_h = -1, -1, -1.0, np.uint64(0)
        for q in range(num_parts):
            if not active[q] or part_w[q] != min_w:
                continue
            u, c, h = _best_frontier_node(q, vw, out, part_w, max_w, ent_node, ent_w, ent_next, head, salt)
            if u < 0:
                active[q] = False
            elif c > best_c or (c == best_c and h < best_h):
                p, best, best_c, best_h = q, u, c, h
        if p < 0:
            continue
        m = _grow_into(best, p, indptr, indices, data, vw, out, part_w, last_listed, latest, ent_node, ent_w, ent_next, head, m)
    left = n
    for u in range(n):
        if out[u] >= 0:
            left -= 1
    while left > 0:  # leftovers (their neighbouring parts filled up) join their lightest neighbouring part
        moved = 0
        for u in range(n):
            if out[u] >= 0:
                continue
            best = -1
            for e in range(indptr[u], indptr[u + 1]):
                q = out[indices[e]]
                if q >= 0 and (best < 0 or part_w[q] < part_w[best]):
                    best = q
            if best >= 0:
                out[u] = best
                part_w[best] += vw[u]
                moved += 1
        left -= moved
        if moved == 0:  # only unreached components are left: the first joins the lightest part
            for u in range(n):
                if out[u] < 0:
                    best = np.argmin(part_w)
                    out[u] = best
                    part_w[best] += vw[u]
                    left -= 1
                    break
    return out
