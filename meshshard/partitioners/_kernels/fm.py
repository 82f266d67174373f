"""Compiled (numba) k-way Fiduccia-Mattheyses refinement: gain heap, hill climbing, rollback to the best prefix.

:func:`fm_refine` is the entry point; it rates moves either from rows of each node's edge weight to every part
(kept up to date as nodes move) or from a tally of the node's edges (:mod:`~meshshard.partitioners._kernels.moves`),
the same partition either way. Sequential with hashed tie-breaks: the same input and salt give the same result.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import any_layout, njit
from meshshard.partitioners._kernels.candidates import list_around, candidate_cut
from meshshard.partitioners._kernels.csr import part_loads
from meshshard.partitioners._kernels.heap import heap_pop, heap_push
from meshshard.partitioners._kernels.moves import best_move, move_node, scan_move
from meshshard.partitioners._kernels.tiebreak import mix

__all__ = ['fm_refine']

#: fm_refine keeps rows of each rated node's edge weight to every part (float64 + int32, ``P`` each, in the order of
#: first rating) up to this many entries ``n * P``; above, it tallies each node's edges per rating. Rows save
#: re-reading a node's edges at every rating; kept in first-rating order, the rows a pass reads lie together, so they
#: stay cheaper than tallies up to large graphs (at the node ids, large rows were read at random and lost). The
#: partitions are the same either way
_ROW_ENTRIES = 1 << 21


@njit(cache=True, inline="always")
def _fill_row(u, r, indptr, indices, data, assign, row_w, row_n):
    """Tally ``u``'s edges into row ``r`` of ``row_w`` (edge weight to each part, in edge order as :func:`tally`)
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
    """:func:`scan_move` of a node (in part ``own``, of weight ``wu``) from its rows ``r`` (see :func:`_fm_passes`):
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
    # chosen here rather than in a kernel, so only the variant used is compiled
    rows = np.empty((0, 0)) if assign.shape[0] * num_parts <= _ROW_ENTRIES else np.empty(0)
    return _fm_passes_any_layout(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit,
                                 min_gain, salt, listed, cand, count, rows)


@njit(cache=True, nogil=True)
def _fm_passes(indptr, indices, data, vw, assign, num_parts, max_w, max_passes, stall_limit, min_gain, salt, listed,
               cand, count, rows):
    """:func:`fm_refine`'s passes. ``rows`` 2-D (any shape): each node rated keeps rows of its edge weight and edge
    count to every part (float64 and int32 ``[n, P]``; node ``u``'s are row ``slot[u]``, handed out in the order of
    first rating), updated as its neighbours move (the rollback included), so
    rating it again reads P numbers instead of its edges; the moves' neighbours, re-rated after every move, are
    most of the ratings. ``rows`` 1-D: every rating tallies the node's edges. The two are separate compilations
    (``rows.ndim`` is a constant to numba, which drops the other branch: a run-time switch between them slows the
    tally kernel down), and they rate every node alike, so they return the same partition for integer
    weights (for float weights the rows' sums may differ in the last bits; tests/partitioners/_kernels/test_fm.py
    checks it). See ``_ROW_ENTRIES`` for the choice between them. The "fill the row if missing, then rate from it"
    steps are written out at each rating: as one inlined helper (a branch inside) they slowed the passes down."""
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
    # the ratings (and the rows) of the nodes rated so far, in the order of their first rating: a pass rates a
    # fraction of the nodes, and arrays indexed by node id spread those over most of their pages, each a page fault
    # (malloc gives the memory back to the system between calls); the same partitions, fewer page faults
    slot = np.full(n, -1, dtype=np.int32)
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
            k = slot[u]
            if k < 0:  # never rated, so dirty
                k = slot[u] = used
                used += 1
                if rows.ndim == 2:
                    _fill_row(u, k, indptr, indices, data, assign, row_w, row_n)
            if dirty[u] or (tgt_c[k] < 0 and _room_in(k, no_room, vw[u], part_w, max_w)):
                dirty[u] = False
                if rows.ndim == 2:
                    g, t, out, boundary = _row_move(k, assign[u], vw[u], part_w, max_w, row_w, row_n)
                else:
                    g, t, out, boundary = scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
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
                size = heap_push(hk, ht, hn, size, gain_c[k], mix(u, s), u)
        nc = kept
        nmoves, best_len, cum, best_cum = 0, 0, 0.0, 0.0
        while size > 0:
            g, u, size = heap_pop(hk, ht, hn, size)
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
                g2, t = best_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
            if t < 0:
                continue
            if g2 != g:  # stale entry (a neighbour moved or a part filled up): queue the fresh gain
                size = heap_push(hk, ht, hn, size, g2, mix(u, s), u)
                continue
            move_node(u, src, t, assign, vw, part_w, sizes)
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
            # one walk over u's edges shifts each neighbour's rows, then re-rates it (cheaper than a walk for each)
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
                        gv, tv = best_move(v, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
                    if tv >= 0:
                        size = heap_push(hk, ht, hn, size, gv, mix(v, s), v)
        for i in range(nmoves - 1, best_len - 1, -1):  # roll back past the best prefix
            u, src = log_node[i], log_from[i]
            t = assign[u]
            move_node(u, t, src, assign, vw, part_w, sizes)
            if rows.ndim == 2:
                _shift_rows(u, t, src, indptr, indices, data, slot, row_w, row_n)
        for i in range(best_len):  # the kept moves may have made their neighbours boundary nodes
            u = log_node[i]
            nc = list_around(u, indptr, indices, listed, cand, nc)
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


#: :func:`_fm_passes` with ``data`` typed for any layout: one compilation serves the zero-stride unit weights of the
#: finest level and the contiguous weights of the coarse levels
_fm_passes_any_layout = any_layout(_fm_passes, "data")
