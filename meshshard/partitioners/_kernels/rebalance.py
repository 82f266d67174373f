"""Compiled (numba) rebalancing: move boundary nodes out of parts above the bound, cheapest cut increase first.

Excess passes through full parts towards parts with room, guided by the parts' adjacency
(:func:`quotient_graph`). Sequential with hashed tie-breaks: the same input and salt give the same result.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.candidates import list_around
from meshshard.partitioners._kernels.csr import part_loads
from meshshard.partitioners._kernels.heap import heap_pop, heap_push
from meshshard.partitioners._kernels.moves import feasible_target, move_node, tally, untally
from meshshard.partitioners._kernels.tiebreak import mix

__all__ = ['quotient_graph', 'rebalance']


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
    The first choice is :func:`best_move`'s; both come from one tally of ``u``'s row."""
    own = assign[u]
    nt = tally(u, indptr, indices, data, assign, conn, touched)
    best, best_c = feasible_target(u, own, vw, part_w, max_w, conn, touched, nt)
    if best < 0:
        for i in range(nt):
            p = touched[i]
            if p == own or dist[p] >= dist[own] or part_w[p] + vw[u] > start_w[own]:
                continue
            c = conn[p]
            if c > best_c or (c == best_c and (part_w[p] < part_w[best] or (part_w[p] == part_w[best] and p < best))):
                best, best_c = p, c
    gain = best_c - max(conn[own], 0.0)
    untally(conn, touched, nt)
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
    # within a node (a channel mesh one node over needed more than 2 P + 8 rounds, which threw the whole V-cycle
    # away)
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
                size = heap_push(hk, ht, hn, size, g, mix(u, s), u)
        moved = 0
        while size > 0:
            g, u, size = heap_pop(hk, ht, hn, size)
            src = assign[u]
            if part_w[src] <= max_w or sizes[src] <= 1:
                continue
            g2, t = _rebalance_move(u, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched)
            if t < 0:
                continue
            if g2 != g:
                size = heap_push(hk, ht, hn, size, g2, mix(u, s), u)
                continue
            move_node(u, src, t, assign, vw, part_w, sizes)
            moved += 1
            nc = list_around(u, indptr, indices, listed, cand, nc)
            if part_w[src] <= max_w and not _any_over(part_w, max_w):
                break  # only a move out of a part above the bound comes next: none is left
            for e in range(indptr[u], indptr[u + 1]):  # the move exposed new boundary nodes of src
                v = indices[e]
                if assign[v] == src and part_w[src] > max_w and vw[v] > 0.0:
                    gv, tv = _rebalance_move(v, indptr, indices, data, assign, vw, part_w, max_w, dist, start_w, conn, touched)
                    if tv >= 0:
                        size = heap_push(hk, ht, hn, size, gv, mix(v, s), v)
        if moved == 0:
            if given_q:  # a coarser level's adjacency may route the excess where no boundary leads now
                q_indptr, q_indices = quotient_graph(indptr, indices, assign, num_parts, cand, nc)
                given_q = False
                continue
            break
    count[0] = nc
    return not _any_over(part_w, max_w)
