r"""Multilevel boundary refinement: lower the edge cut of a given partition (vectorised numpy).

Greedy moves of single boundary nodes stall once every boundary node is locally optimal: a
geometric cut that crosses a dense region of a graded mesh cannot slide to a sparse region one
node at a time without passing through worse states. This module runs the refinement on a
hierarchy of coarser graphs, as METIS does in its uncoarsening phase, but starting from the given
(geometric) partition:

1. coarsen: heavy-edge matching restricted to edges *inside* a part (mutual proposals, a few
   vectorised rounds per level), so every coarse node lies in one part and the coarse cut equals
   the fine cut; coarse node weights and edge weights are sums;
2. refine at the coarsest level, project to the next finer level, refine again, ..., down to the
   original graph. Moving one coarse node moves a whole cluster of fine nodes.

Each refinement is a greedy Fiduccia-Mattheyses-style pass (:func:`greedy_refine`): positive-gain
moves of boundary nodes to their best neighbouring part, as an independent set (no two moving
nodes adjacent, so every gain is exact), admitted while the target part stays under
``imbalance * mean``; zero-gain moves from heavier to lighter parts let boundaries slide; a final
rebalancing pass moves the cheapest boundary nodes out of any part above the bound.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import scipy.sparse as sp

__all__ = ["multilevel_refine", "greedy_refine", "symmetric_adjacency"]


def symmetric_adjacency(edge_index: np.ndarray, num_nodes: int, edge_weights: Optional[np.ndarray] = None) -> sp.csr_matrix:
    """Undirected CSR adjacency without self loops; an edge given several times keeps its largest weight.

    Args:
        edge_index: int64 ``[2, E]``, one or both directions.
        num_nodes: ``N``.
        edge_weights: optional float64 ``[E]`` (default: all 1).

    Returns:
        symmetric ``scipy.sparse.csr_matrix [N, N]`` with sorted indices.
    """
    row, col = edge_index
    keep = row != col
    row, col = row[keep], col[keep]
    w = np.ones(row.shape[0]) if edge_weights is None else np.asarray(edge_weights, dtype=np.float64)[keep]
    lo, hi = np.minimum(row, col), np.maximum(row, col)
    key = lo * np.int64(num_nodes) + hi
    if edge_weights is None:
        key = np.sort(key)  # all weights 1: no need to carry them through the sort
    else:
        order = np.lexsort((-w, key))
        key, w = key[order], w[order]
    first = np.ones(key.shape[0], dtype=bool)
    first[1:] = key[1:] != key[:-1]
    key, w = key[first], w[first]
    lo, hi = key // num_nodes, key % num_nodes
    adj = sp.csr_matrix((np.concatenate([w, w]), (np.concatenate([lo, hi]), np.concatenate([hi, lo]))),
                        shape=(num_nodes, num_nodes))
    adj.sort_indices()
    return adj


def _hash(x: np.ndarray, salt: int) -> np.ndarray:
    h = x.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64((salt * 0x632BE59BD9B4E019 + 1) % 2**64)
    h ^= h >> np.uint64(31)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(29)
    return h


def _accept_in_order(groups: np.ndarray, amounts: np.ndarray, room: np.ndarray) -> np.ndarray:
    """Moves listed in priority order: accept while the group's running total fits its room."""
    order = np.argsort(groups, kind="stable")
    g, a = groups[order], amounts[order]
    cum = np.cumsum(a)
    start = np.searchsorted(g, g, side="left")
    base = np.where(start > 0, cum[np.maximum(start - 1, 0)], 0.0)
    ok = np.empty(groups.shape[0], dtype=bool)
    ok[order] = (cum - base) <= room[g] + 1e-9 * np.abs(room[g])
    return ok


def _rows_edges(indptr: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Positions in the CSR arrays of every edge leaving ``nodes`` (vectorised range expansion)."""
    starts = indptr[nodes]
    lens = indptr[nodes + 1] - starts
    total = int(lens.sum())
    offsets = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offsets, lens)


def _boundary_connectivity(assign, indptr, col, ew, num_parts, n, active):
    """Boundary nodes among ``active`` (all when ``None``) and their connectivity ``conn [nb, P]``."""
    if active is None:
        row = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        pos = None
    else:
        pos = _rows_edges(indptr, active)
        row = np.repeat(active, indptr[active + 1] - indptr[active])
    c = col if pos is None else col[pos]
    a_col = assign[c]
    cut = assign[row] != a_col
    if not cut.any():
        return None
    is_b = np.zeros(n, dtype=bool)
    is_b[row[cut]] = True
    bnodes = np.flatnonzero(is_b)
    local = np.full(n, -1, dtype=np.int64)
    local[bnodes] = np.arange(bnodes.shape[0])
    e_sel = is_b[row]
    lr = local[row[e_sel]]
    w_sel = (ew if pos is None else ew[pos])[e_sel]
    conn = np.bincount(lr * num_parts + a_col[e_sel], weights=w_sel,
                       minlength=bnodes.shape[0] * num_parts).reshape(-1, num_parts)
    return bnodes, local, lr, c[e_sel], conn


def greedy_refine(
    assign: np.ndarray,
    num_parts: int,
    adj: sp.csr_matrix,
    weights: np.ndarray,
    max_w: float,
    max_rounds: int = 32,
    salt: int = 0,
) -> np.ndarray:
    """Greedy boundary moves on one level (see the module docstring). Modifies ``assign``.

    Args:
        assign: int64 ``[N]`` part ids.
        num_parts: ``P``.
        adj: symmetric CSR adjacency ``[N, N]`` (edge weights as data).
        weights: float64 ``[N]`` node weights.
        max_w: largest part weight a move may create (``imbalance * mean``).
        max_rounds: at most this many rounds of simultaneous moves.
        salt: varies the hash that breaks ties between equal-gain moves.

    Returns:
        ``assign``, refined; parts stay non-empty.
    """
    n = assign.shape[0]
    indptr = adj.indptr.astype(np.int64)
    col = adj.indices.astype(np.int64)
    ew = adj.data
    part_w = np.bincount(assign, weights=weights, minlength=num_parts)
    sizes = np.bincount(assign, minlength=num_parts)
    active = None  # None: look at every node; else only where the last round changed something
    for round_ in range(max_rounds):
        if part_w.max() > max_w:
            active = None  # rebalancing needs every boundary node of the heavy parts
        found = _boundary_connectivity(assign, indptr, col, ew, num_parts, n, active)
        if found is None:
            if active is None:
                break
            active = None
            continue
        bnodes, local, lr, lcol, conn = found
        nb = bnodes.shape[0]
        src = assign[bnodes]
        ar = np.arange(nb)
        own = conn[ar, src].copy()
        conn[ar, src] = -np.inf
        conn[conn <= 0] = -np.inf
        tgt = np.argmax(conn, axis=1)
        gain = conn[ar, tgt] - own
        wb = weights[bnodes]
        over = part_w[src] > max_w
        slide = (gain == 0) & (part_w[src] > part_w[tgt] + wb)
        cand = (gain > 0) | slide | (over & np.isfinite(gain))
        cand &= (part_w[tgt] + wb <= max_w) & (sizes[src] > 1)
        if not cand.any():
            if active is None:
                break
            active = None  # part weights changed elsewhere: one full look before stopping
            continue
        ci = np.flatnonzero(cand)
        # priority: overweight sources first, then gain, then a hash -> unique ranks
        rank_order = np.lexsort((_hash(bnodes[ci], salt * 1009 + round_), gain[ci], over[ci]))
        prio = np.zeros(nb, dtype=np.int64)
        prio[ci[rank_order]] = np.arange(1, ci.shape[0] + 1)
        lc = local[lcol]
        both = (lc >= 0) & (prio[lr] > 0)
        nbr = np.zeros(nb, dtype=np.int64)
        np.maximum.at(nbr, lr[both], prio[np.maximum(lc[both], 0)])
        win = cand & (prio > nbr)
        mi = np.flatnonzero(win)
        mi = mi[np.argsort(-prio[mi], kind="stable")]
        m_src, m_tgt, m_w = src[mi], tgt[mi], wb[mi]
        ok = _accept_in_order(m_tgt, m_w, max_w - part_w)
        ok &= _accept_in_order(m_src, np.ones(mi.shape[0]), sizes - 1.0)
        # a negative-gain move is only worth it while its source is still overweight
        neg = gain[mi] < 0
        if neg.any():
            excess = np.maximum(part_w - max_w, 0.0)
            ok_neg = _accept_in_order(m_src, np.where(neg, m_w, 0.0), excess + m_w.max())
            ok &= ~neg | ok_neg
        mi, m_src, m_tgt, m_w = mi[ok], m_src[ok], m_tgt[ok], m_w[ok]
        if mi.shape[0] == 0:
            if active is None:
                break
            active = None
            continue
        moved = bnodes[mi]
        assign[moved] = m_tgt
        # next round: moved nodes, their neighbours, and candidates that lost this round
        nxt = np.zeros(n, dtype=bool)
        nxt[col[_rows_edges(indptr, moved)]] = True
        nxt[moved] = True
        nxt[bnodes[cand]] = True
        active = np.flatnonzero(nxt)
        part_w += np.bincount(m_tgt, weights=m_w, minlength=num_parts) - np.bincount(m_src, weights=m_w, minlength=num_parts)
        sizes += np.bincount(m_tgt, minlength=num_parts) - np.bincount(m_src, minlength=num_parts)
    return assign


def _coarsen(adj: sp.csr_matrix, weights: np.ndarray, assign: np.ndarray, max_node_w: float, salt: int):
    """Heavy-edge matching inside parts -> ``(cmap [n], coarse adj, coarse weights, coarse assign)``."""
    n = adj.shape[0]
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(adj.indptr))
    col = adj.indices.astype(np.int64)
    ok_edge = (assign[row] == assign[col]) & (weights[row] + weights[col] <= max_node_w)
    # heaviest edge per node, ties by a hash: score = weight + hash fraction in [0, 0.5) * min weight
    wmin = float(adj.data.min()) if adj.nnz else 1.0
    # the tie-break must be a symmetric function of the edge: both ends then rank it alike, and
    # locally dominant edges are mutual proposals (matches grow fast, round after round)
    edge_id = np.minimum(row, col) * np.int64(n) + np.maximum(row, col)
    jitter = (_hash(edge_id, salt) >> np.uint64(11)).astype(np.float64) / 2.0**53
    score = adj.data + 0.5 * wmin * jitter
    mate = np.full(n, -1, dtype=np.int64)
    for _ in range(6):
        free = mate < 0
        live = ok_edge & free[row] & free[col]
        if not live.any():
            break
        s = np.where(live, score, 0.0)
        prop = np.full(n, -1, dtype=np.int64)
        nonempty = np.flatnonzero(np.diff(adj.indptr) > 0)
        rowmax = np.zeros(n)
        rowmax[nonempty] = np.maximum.reduceat(s, adj.indptr[nonempty])
        hit = np.flatnonzero((s == rowmax[row]) & (s > 0))
        first = np.ones(hit.shape[0], dtype=bool)
        first[1:] = row[hit[1:]] != row[hit[:-1]]  # entries are row-sorted: first best per row
        prop[row[hit[first]]] = col[hit[first]]
        u = np.flatnonzero(prop >= 0)
        mutual = u[prop[prop[u]] == u]
        mate[mutual] = prop[mutual]
    rep = np.where(mate >= 0, np.minimum(np.arange(n), mate), np.arange(n))
    uniq, cmap = np.unique(rep, return_inverse=True)
    nc = uniq.shape[0]
    agg = sp.csr_matrix((np.ones(n), (cmap, np.arange(n))), shape=(nc, n))
    cadj = (agg @ adj @ agg.T).tocsr()
    cadj.setdiag(0)
    cadj.eliminate_zeros()
    cadj.sort_indices()
    return cmap, cadj, np.bincount(cmap, weights=weights, minlength=nc), assign[uniq]


def multilevel_refine(
    assignment: np.ndarray,
    num_parts: int,
    edge_index: np.ndarray,
    weights: Optional[np.ndarray] = None,
    edge_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    coarse_imbalance: Optional[float] = None,
    min_coarse_nodes: int = 0,
    cycles: int = 3,
) -> np.ndarray:
    """Refine ``assignment`` on a hierarchy of coarsened graphs (see the module docstring).

    Args:
        assignment: int ``[N]`` part ids (not modified).
        num_parts: number of parts.
        edge_index: int64 ``[2, E]`` graph, one or both directions.
        weights: optional float64 ``[N]`` node weights.
        edge_weights: optional float64 ``[E]`` positive edge weights.
        imbalance: bound on ``max part weight / mean`` of the result.
        coarse_imbalance: looser bound used on the coarse levels; the finest level restores
            ``imbalance`` (if it cannot, the input is refined on the original graph alone, which
            never breaks a bound the input met). Default: ``imbalance + 0.09 * (c + 1)`` in
            V-cycle ``c``, a looser bound each cycle (lets ever larger clusters cross the cut;
            which slack works best differs from mesh to mesh, so the cycles try several).
        min_coarse_nodes: stop coarsening below this many nodes (default ``40 * num_parts``).
        cycles: V-cycles; the first starts from the input, the next from the best result so far,
            each with a different matching (a greedy hierarchy's result depends on it) and coarse
            bound. The lowest cut among them and a single-level greedy pass is returned.

    Returns:
        int64 ``[N]`` refined part ids; parts stay non-empty.
    """
    assign = np.array(assignment, dtype=np.int64, copy=True)
    n = assign.shape[0]
    if num_parts < 2 or n == 0 or edge_index.shape[1] == 0:
        return assign
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    mean = float(w.sum()) / num_parts
    # measured on the real meshes: a loose coarse bound lets whole clusters cross the cut, and
    # the best looseness varies, so each V-cycle loosens it a little more
    def coarse_bound(cycle: int) -> float:
        return imbalance + 0.09 * (cycle + 1) if coarse_imbalance is None else coarse_imbalance

    min_coarse_nodes = 40 * num_parts if not min_coarse_nodes else min_coarse_nodes
    adj = symmetric_adjacency(edge_index, n, edge_weights)
    best, best_cut = None, np.inf
    if np.bincount(assign, weights=w, minlength=num_parts).max() <= imbalance * mean and np.bincount(assign, minlength=num_parts).min() > 0:
        best, best_cut = assign, _cut_weight(adj, assign)  # never return worse than the input
    flat = greedy_refine(assign.copy(), num_parts, adj, w, imbalance * mean, max_rounds=64)  # one level only
    if _cut_weight(adj, flat) < best_cut and np.bincount(flat, weights=w, minlength=num_parts).max() <= imbalance * mean:
        best, best_cut = flat, _cut_weight(adj, flat)
    start = assign
    for cycle in range(max(1, int(cycles))):
        out = _v_cycle(start.copy(), num_parts, adj, w, mean, imbalance, coarse_bound(cycle), min_coarse_nodes, cycle)
        cut = _cut_weight(adj, out)
        if cut < best_cut:
            best, best_cut = out, cut
        start = best
    return best


def _cut_weight(adj: sp.csr_matrix, assign: np.ndarray) -> float:
    row = np.repeat(np.arange(adj.shape[0], dtype=np.int64), np.diff(adj.indptr))
    return float(adj.data[assign[row] != assign[adj.indices]].sum()) / 2


def _v_cycle(assign, num_parts, adj, w, mean, imbalance, coarse_imbalance, min_coarse_nodes, salt):
    levels: List[Tuple[np.ndarray, sp.csr_matrix, np.ndarray]] = []  # (cmap to next, adj, weights)
    original = assign.copy()
    cur_adj, cur_w, cur_a = adj, w, assign
    max_node_w = max(0.5 * (coarse_imbalance - 1.0) * mean, float(w.max()))
    for depth in range(30):
        if cur_adj.shape[0] <= min_coarse_nodes:
            break
        cmap, cadj, cw, ca = _coarsen(cur_adj, cur_w, cur_a, max_node_w, 97 * salt + depth)
        if cadj.shape[0] > 0.9 * cur_adj.shape[0]:
            break  # matching found too little to coarsen: stop here
        levels.append((cmap, cur_adj, cur_w))
        cur_adj, cur_w, cur_a = cadj, cw, ca
    # refine from the coarsest level up, projecting the parts down each time
    cur_a = greedy_refine(cur_a, num_parts, cur_adj, cur_w, coarse_imbalance * mean, salt=97 * salt + len(levels))
    for depth in range(len(levels) - 1, -1, -1):
        cmap, fadj, fw = levels[depth]
        cur_a = cur_a[cmap]
        bound = imbalance if depth == 0 else coarse_imbalance
        cur_a = greedy_refine(cur_a, num_parts, fadj, fw, bound * mean, salt=97 * salt + depth)
    if not levels:
        cur_a = greedy_refine(cur_a, num_parts, adj, w, imbalance * mean)
    part_w = np.bincount(cur_a, weights=w, minlength=num_parts)
    if part_w.max() > imbalance * mean * (1 + 1e-12) or (np.bincount(cur_a, minlength=num_parts) == 0).any():
        cur_a = greedy_refine(original, num_parts, adj, w, imbalance * mean)
    return cur_a
