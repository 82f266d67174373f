"""Boundary refinement: greedy, vectorised Fiduccia-Mattheyses-style passes that lower the edge cut."""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["refine_boundary"]


def _group_first(keys_sorted: np.ndarray) -> np.ndarray:
    """Mask of the first element of every run of equal keys in a sorted array."""
    first = np.ones(keys_sorted.shape[0], dtype=bool)
    first[1:] = keys_sorted[1:] != keys_sorted[:-1]
    return first


def _capacity_mask(group: np.ndarray, amount: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Keep items (already sorted by group, best first) while their group's running sum fits ``room``."""
    if group.size == 0:
        return np.zeros(0, dtype=bool)
    csum = np.cumsum(amount)
    first = _group_first(group)
    start_idx = np.maximum.accumulate(np.where(first, np.arange(group.size), 0))
    before = np.where(start_idx > 0, csum[start_idx - 1], 0.0)
    running = csum - before
    return running <= room[group] + 1e-9


def refine_boundary(
    assign: np.ndarray,
    indptr: np.ndarray,
    indices: np.ndarray,
    num_parts: int,
    *,
    edge_weights: Optional[np.ndarray] = None,
    node_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    max_passes: int = 50,
    seed: int = 0,
    allow_zero: bool = True,
) -> np.ndarray:
    r"""Move boundary nodes to the neighbouring part they are most connected to, lowering the cut.

    Each pass (all numpy, no Python loop over nodes):

    1. boundary nodes = endpoints of cut edges; for each, its connection weight to every
       adjacent part; gain of a move = weight to the best other part - weight to its own part;
    2. nodes with gain > 0 propose to move; two adjacent proposers with *different*
       (from, to) pairs conflict and the one with the lower (gain, random tie-break) stays put.
       Adjacent proposers with the same pair may both move: that only adds to the gain, so the
       cut never rises;
    3. per target part, proposers are accepted best gain first while the part's weight stays
       ``<= imbalance * mean`` (and a source part keeps at least one node).

    Passes repeat until none moves or ``max_passes``.

    Args:
        assign: int64 ``[N]`` initial part ids (not modified).
        indptr, indices: symmetric CSR adjacency (no self loops, no repeats).
        num_parts: ``P``.
        edge_weights: float64 per CSR entry (symmetric), or None for unit weights.
        node_weights: float64 ``[N]`` or None for unit weights.
        imbalance: bound on max part weight / mean part weight kept by every move.
        max_passes: pass limit.
        seed: tie-break seed (result is deterministic for a given seed).

    Returns:
        int64 ``[N]`` refined part ids.
    """
    n = assign.shape[0]
    assign = assign.copy()
    if num_parts < 2 or indices.size == 0:
        return assign
    p = np.int64(num_parts)
    nw = np.ones(n) if node_weights is None else node_weights
    ew = np.ones(indices.size) if edge_weights is None else edge_weights
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    part_w = np.bincount(assign, weights=nw, minlength=num_parts)
    max_w = imbalance * part_w.sum() / num_parts
    tie = np.random.default_rng(seed).permutation(n)  # deterministic random tie-break rank
    stale = 0  # passes in a row without a cut decrease
    for it in range(max_passes):
        nbr_part = assign[indices]
        cut = assign[rows] != nbr_part
        if not cut.any():
            break
        is_bnd = np.zeros(n, dtype=bool)
        is_bnd[rows[cut]] = True
        sel = is_bnd[rows]
        e_row, e_part, e_w = rows[sel], nbr_part[sel], ew[sel]
        # connection weight of every boundary node to every adjacent part
        key = e_row * p + e_part
        order = np.argsort(key, kind="stable")
        key = key[order]
        first = _group_first(key)
        conn = np.add.reduceat(e_w[order], np.flatnonzero(first))
        c_row, c_part = np.divmod(key[first], p)
        own = assign[c_row] == c_part
        internal = np.zeros(n)
        internal[c_row[own]] = conn[own]
        ext = ~own
        x_row, x_part, x_conn = c_row[ext], c_part[ext], conn[ext]
        # best other part per node: sort by row, then connection desc, then part id
        o = np.lexsort((x_part, -x_conn, x_row))
        x_row, x_part, x_conn = x_row[o], x_part[o], x_conn[o]
        best = _group_first(x_row)
        mv_node, mv_to = x_row[best], x_part[best]
        gain = x_conn[best] - internal[mv_node]
        # zero-gain moves let a boundary slide past a local minimum; only one direction per pass
        # (from lower to higher part id on even passes, the reverse on odd) so they cannot swap back
        src_all = assign[mv_node]
        zero_ok = (gain == 0) & ((src_all < mv_to) if it % 2 == 0 else (src_all > mv_to))
        # ... and only into parts lighter than their source, keeping the headroom for real gains
        zero_ok &= part_w[mv_to] + nw[mv_node] <= part_w[src_all]
        pos = (gain > 0) | (zero_ok & allow_zero)
        mv_node, mv_to, gain = mv_node[pos], mv_to[pos], gain[pos]
        if mv_node.size == 0:
            stale += 1
            if stale >= 2 or not allow_zero:
                break
            continue
        # conflicts between adjacent movers heading along different (from, to) pairs
        target = np.full(n, -1, dtype=np.int64)
        target[mv_node] = mv_to
        g_all = np.zeros(n)
        g_all[mv_node] = gain
        ent = np.flatnonzero(target[rows] >= 0)
        u, v = rows[ent], indices[ent]
        clash = (target[v] >= 0) & (target[u] != target[v])  # same source? u, v adjacent movers
        clash |= (target[v] >= 0) & (target[u] == target[v]) & (assign[u] != assign[v])
        u, v = u[clash], v[clash]
        lose = (g_all[u] < g_all[v]) | ((g_all[u] == g_all[v]) & (tie[u] < tie[v]))
        dropped = np.zeros(n, dtype=bool)
        dropped[u[lose]] = True
        keep = ~dropped[mv_node]
        mv_node, mv_to, gain = mv_node[keep], mv_to[keep], gain[keep]
        # balance: best gain first into each target part, within its room
        o = np.lexsort((tie[mv_node], -gain, mv_to))
        mv_node, mv_to, gain = mv_node[o], mv_to[o], gain[o]
        ok = _capacity_mask(mv_to, nw[mv_node], max_w - part_w)
        mv_node, mv_to = mv_node[ok], mv_to[ok]
        # sources keep >= 1 node
        src = assign[mv_node]
        o = np.lexsort((mv_node, src))
        mv_node, mv_to, src = mv_node[o], mv_to[o], src[o]
        sizes = np.bincount(assign, minlength=num_parts)
        ok = _capacity_mask(src, np.ones(src.size), (sizes - 1).astype(np.float64))
        mv_node, mv_to, src = mv_node[ok], mv_to[ok], src[ok]
        if mv_node.size == 0:
            stale += 1
            if stale >= 2 or not allow_zero:
                break
            continue
        total_gain = float(g_all[mv_node].sum())
        stale = 0 if total_gain > 0 else stale + 1
        if stale >= 8:
            break
        w_mv = nw[mv_node]
        part_w -= np.bincount(src, weights=w_mv, minlength=num_parts)
        part_w += np.bincount(mv_to, weights=w_mv, minlength=num_parts)
        assign[mv_node] = mv_to
    return assign
