"""Compiled (numba) greedy graph growing: regrow parts from one seed each, the lightest part growing first.

A start of another kind for the coarsest level of the multilevel refinement: the regrown parts follow the graph
rather than the coordinates. Sequential with hashed tie-breaks: the same input and salt give the same parts.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.tiebreak import mix

__all__ = ['grow_parts']


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
            h = mix(u, salt)
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
