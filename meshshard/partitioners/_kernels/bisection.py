"""Recursive bisection of a small graph (compiled with numba): a start for the coarsest level of refinement.

Each bisection grows one side breadth-first from a seed until it holds its share of the weight,
refines the two sides with 2-way Fiduccia-Mattheyses passes, keeps the lowest cut of a few seeds and
recurses into both sides, as METIS partitions its coarsest graph. Unlike parts grown all at once out
of the geometric start (:func:`~meshshard.partitioners._kernels.grow.grow_parts`), these follow the
graph alone, so the coarsest level gets a start of another kind to choose from. Sequential with
hashed seeds: the same graph and salt give the same parts.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.candidates import list_around
from meshshard.partitioners._kernels.heap import heap_pop, heap_push
from meshshard.partitioners._kernels.tiebreak import mix

__all__ = ["bisect_parts"]

#: the sides of a bisection may exceed their share of the weight by this fraction before the k-way levels
#: rebalance (coarse nodes are heavy; a tight bound leaves FM no room)
_BISECT_SLACK = 0.05
#: FM passes and the stall limit of each bisection's refinement (more gave no better refined cut on the gmsh family,
#: for more time)
_BISECT_PASSES, _BISECT_STALL = 2, 8


@njit(cache=True, nogil=True)
def _induced(indptr, indices, data, vw, nodes, loc):
    """CSR of the subgraph induced by ``nodes`` (``loc[u]``: ``u``'s position in ``nodes``, -1 outside)
    -> ``(indptr, indices, data, vw)``."""
    m = nodes.shape[0]
    s_ptr = np.zeros(m + 1, dtype=np.int64)
    for i in range(m):
        u = nodes[i]
        c = 0
        for e in range(indptr[u], indptr[u + 1]):
            if loc[indices[e]] >= 0:
                c += 1
        s_ptr[i + 1] = s_ptr[i] + c
    s_idx = np.empty(s_ptr[m], dtype=np.int64)
    s_dat = np.empty(s_ptr[m])
    s_vw = np.empty(m)
    for i in range(m):
        u = nodes[i]
        s_vw[i] = vw[u]
        k = s_ptr[i]
        for e in range(indptr[u], indptr[u + 1]):
            j = loc[indices[e]]
            if j >= 0:
                s_idx[k] = j
                s_dat[k] = data[e]
                k += 1
    return s_ptr, s_idx, s_dat, s_vw


@njit(cache=True, nogil=True)
def _peripheral(s_ptr, s_idx, m, start, seen, queue):
    """A node far from ``start`` (the last one a breadth-first search from it reaches) among the first ``m``;
    ``seen`` and ``queue`` are scratch."""
    for i in range(m):
        seen[i] = False
    seen[start] = True
    queue[0] = start
    head, tail = 0, 1
    while head < tail:
        u = queue[head]
        head += 1
        tail = list_around(u, s_ptr, s_idx, seen, queue, tail)  # u is seen: its unseen neighbours
    return queue[tail - 1]


@njit(cache=True, nogil=True)
def _grow_side(s_ptr, s_idx, s_vw, m, seed, target, side, seen, queue, salt):
    """``side[:m]``: 0 for the nodes a breadth-first search from ``seed`` reaches first, up to ``target`` weight
    (a node joins if that leaves side 0 nearer to ``target``); 1 for the rest. An exhausted search restarts from
    an unreached node (hashed order), so a disconnected graph fills up too."""
    for i in range(m):
        side[i] = 1
        seen[i] = False
    w0 = 0.0
    queue[0] = seed
    seen[seed] = True
    head, tail = 0, 1
    probe = 0
    start = np.int64(mix(1, salt) % np.uint64(m))
    while w0 < target:
        if head == tail:  # the search ran out: a node not reached yet starts another
            while probe < m:
                u = start + probe
                if u >= m:
                    u -= m
                probe += 1
                if not seen[u]:
                    seen[u] = True
                    queue[tail] = u
                    tail += 1
                    break
            if head == tail:
                break
        u = queue[head]
        head += 1
        if w0 + 0.5 * s_vw[u] > target:  # would end farther from the target than it is
            continue
        side[u] = 0
        w0 += s_vw[u]
        tail = list_around(u, s_ptr, s_idx, seen, queue, tail)  # u is seen: its unseen neighbours


@njit(cache=True, inline="always")
def _flip(u, s_ptr, s_idx, s_dat, s_vw, side, w, cnt, ext, deg):
    """Move ``u`` to the other side, keeping the sides' weights ``w`` and node counts ``cnt`` and every node's
    edge weight to the other side ``ext`` (``deg``: each node's total edge weight) current."""
    src = side[u]
    dst = 1 - src
    side[u] = dst
    w[src] -= s_vw[u]
    w[dst] += s_vw[u]
    cnt[src] -= 1
    cnt[dst] += 1
    ext[u] = deg[u] - ext[u]
    for e in range(s_ptr[u], s_ptr[u + 1]):
        v = s_idx[e]
        ext[v] += s_dat[e] if side[v] == src else -s_dat[e]


@njit(cache=True, nogil=True)
def _fm_2way(s_ptr, s_idx, s_dat, s_vw, side, max_w0, max_w1, min_n0, min_n1, passes, stall, salt):
    """2-way Fiduccia-Mattheyses passes on ``side`` (0 / 1 per node; modified) -> the cut weight after them.

    Each pass moves the unlocked node of highest gain (cut weight it removes; ties: hashed) whose side
    it joins stays within ``max_w0`` / ``max_w1`` and whose side keeps ``min_n0`` / ``min_n1`` nodes, locks it
    and updates its neighbours' gains, until ``stall`` moves pass without a new best; the moves after the best
    prefix are undone. Up to ``passes`` passes, while one lowers the cut.
    """
    m = s_ptr.shape[0] - 1
    ext = np.zeros(m)  # edge weight to the other side
    deg = np.zeros(m)
    w = np.zeros(2)
    cnt = np.zeros(2, dtype=np.int64)
    cut = 0.0
    for u in range(m):
        w[side[u]] += s_vw[u]
        cnt[side[u]] += 1
        for e in range(s_ptr[u], s_ptr[u + 1]):
            deg[u] += s_dat[e]
            if side[s_idx[e]] != side[u]:
                ext[u] += s_dat[e]
        cut += ext[u]
    cut *= 0.5
    max_w = np.array([max_w0, max_w1])
    min_n = np.array([min_n0, min_n1])
    locked = np.zeros(m, dtype=np.bool_)
    log = np.empty(m, dtype=np.int64)
    cap = m + s_idx.shape[0]
    hk, ht, hn = np.empty(cap), np.empty(cap, dtype=np.uint64), np.empty(cap, dtype=np.int64)
    for pass_ in range(passes):
        s = np.uint64(salt) * np.uint64(1009) + np.uint64(pass_)
        size = 0
        for u in range(m):
            if ext[u] > 0.0:
                size = heap_push(hk, ht, hn, size, 2.0 * ext[u] - deg[u], mix(u, s), u)
        nmoves, best_len, cum, best_cum = 0, 0, 0.0, 0.0
        while size > 0:
            g, u, size = heap_pop(hk, ht, hn, size)
            if locked[u] or g != 2.0 * ext[u] - deg[u]:  # moved, or a stale entry (a fresher one is queued)
                continue
            src = side[u]
            dst = 1 - src
            if w[dst] + s_vw[u] > max_w[dst] or cnt[src] <= min_n[src]:
                continue
            _flip(u, s_ptr, s_idx, s_dat, s_vw, side, w, cnt, ext, deg)
            locked[u] = True
            log[nmoves] = u
            nmoves += 1
            cum += g
            for e in range(s_ptr[u], s_ptr[u + 1]):
                v = s_idx[e]
                if not locked[v]:
                    size = heap_push(hk, ht, hn, size, 2.0 * ext[v] - deg[v], mix(v, s), v)
            if cum > best_cum + 1e-9:
                best_cum, best_len = cum, nmoves
            elif nmoves - best_len >= stall:
                break
        for i in range(nmoves - 1, best_len - 1, -1):  # roll back past the best prefix
            _flip(log[i], s_ptr, s_idx, s_dat, s_vw, side, w, cnt, ext, deg)
        for i in range(nmoves):
            locked[log[i]] = False
        cut -= best_cum
        if best_cum <= 0.0:
            break
    return cut


@njit(cache=True, nogil=True)
def _bisect(s_ptr, s_idx, s_dat, s_vw, k_left, k_right, tries, passes, stall, salt):
    """Best of ``tries`` grown-and-refined bisections of a graph -> int64 ``[m]`` sides, side 0 holding about
    ``k_left / (k_left + k_right)`` of the weight; each side keeps at least its number of parts in nodes."""
    m = s_ptr.shape[0] - 1
    total = 0.0
    for i in range(m):
        total += s_vw[i]
    target = total * k_left / (k_left + k_right)
    side = np.empty(m, dtype=np.int64)
    seen = np.empty(m, dtype=np.bool_)
    queue = np.empty(m, dtype=np.int64)
    best = np.empty(m, dtype=np.int64)
    best_cut = np.inf
    found = False
    for t in range(tries):
        s = mix(t + 7, salt)
        seed = np.int64(s % np.uint64(m))
        if t == 0:  # first seed: a node at the far end of the graph, as METIS picks
            seed = _peripheral(s_ptr, s_idx, m, seed, seen, queue)
        _grow_side(s_ptr, s_idx, s_vw, m, seed, target, side, seen, queue, s)
        n0 = 0
        for i in range(m):
            if side[i] == 0:
                n0 += 1
        if n0 < k_left or m - n0 < k_right:
            continue
        cut = _fm_2way(s_ptr, s_idx, s_dat, s_vw, side, target * (1.0 + _BISECT_SLACK),
                       (total - target) * (1.0 + _BISECT_SLACK), k_left, k_right, passes, stall, s)
        if cut < best_cut:
            best_cut = cut
            found = True
            for i in range(m):
                best[i] = side[i]
    if not found:  # too few nodes for a weighted split: the first nodes by id, by count
        n_left = max(k_left, min(m - k_right, int(round(m * k_left / (k_left + k_right)))))
        for i in range(m):
            best[i] = 0 if i < n_left else 1
    return best


@njit(cache=True, nogil=True)
def bisect_parts(indptr, indices, data, vw, num_parts, tries, salt):
    """Recursive bisection of a symmetric CSR graph into ``num_parts`` parts -> int64 ``[n]`` part ids.

    A set of nodes holding ``k`` parts is bisected in the ratio ``k // 2 : k - k // 2`` of its weight
    (the lowest cut of ``tries`` seeds at the first bisection, half as many at each depth below: the first
    cuts shape the rest) and each side is bisected in turn, so any ``num_parts`` comes out near balanced
    (each bisection within ``_BISECT_SLACK`` of its share, plus a node; the k-way levels rebalance).
    Every part gets a node when ``n >= num_parts``; with fewer nodes, the last parts stay empty. Meant for
    small graphs (the coarsest level, ~30 nodes per part): each bisection builds its induced subgraph.

    Args:
        indptr, indices, data: symmetric CSR (int64 ``[n + 1]``, int64 ``[nnz]``, float64 ``[nnz]``).
        vw: float64 ``[n]`` node weights.
        num_parts: ``P``.
        tries: seeds tried at the first bisection (at least 1 at every depth).
        salt: varies the seeds.

    Returns:
        int64 ``[n]`` part ids in ``[0, P)``.
    """
    n = indptr.shape[0] - 1
    out = np.zeros(n, dtype=np.int64)
    if num_parts <= 1 or n == 0:
        return out
    loc = np.full(n, -1, dtype=np.int64)
    # work list of (node set, first part id, parts, depth): node sets are runs of `order`
    order = np.arange(n)
    seg_start = np.empty(2 * num_parts, dtype=np.int64)
    seg_end = np.empty(2 * num_parts, dtype=np.int64)
    seg_first = np.empty(2 * num_parts, dtype=np.int64)
    seg_k = np.empty(2 * num_parts, dtype=np.int64)
    seg_depth = np.zeros(2 * num_parts, dtype=np.int64)
    seg_start[0], seg_end[0], seg_first[0], seg_k[0] = 0, n, 0, num_parts
    top = 1
    scratch = np.empty(n, dtype=np.int64)
    while top > 0:
        top -= 1
        a, b, first, k, depth = seg_start[top], seg_end[top], seg_first[top], seg_k[top], seg_depth[top]
        m = b - a
        if k == 1:
            for i in range(a, b):
                out[order[i]] = first
            continue
        if m <= k:  # a node per part (the last parts stay empty only if the graph is smaller than num_parts)
            for i in range(a, b):
                out[order[i]] = first + (i - a)
            continue
        k_left = k // 2
        k_right = k - k_left
        nodes = order[a:b].copy()
        for i in range(m):
            loc[nodes[i]] = i
        side = _bisect(*_induced(indptr, indices, data, vw, nodes, loc), k_left, k_right, max(1, tries >> depth),
                       _BISECT_PASSES, _BISECT_STALL, salt + 31 * first + k)
        for i in range(m):
            loc[nodes[i]] = -1
        n0 = 0
        for i in range(m):
            if side[i] == 0:
                scratch[n0] = nodes[i]
                n0 += 1
        j = n0
        for i in range(m):
            if side[i] != 0:
                scratch[j] = nodes[i]
                j += 1
        for i in range(m):
            order[a + i] = scratch[i]
        seg_start[top], seg_end[top], seg_first[top], seg_k[top], seg_depth[top] = a + n0, b, first + k_left, k_right, depth + 1
        top += 1
        seg_start[top], seg_end[top], seg_first[top], seg_k[top], seg_depth[top] = a, a + n0, first, k_left, depth + 1
        top += 1
    return out
