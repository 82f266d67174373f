r"""Multilevel boundary refinement: lower the edge cut of a given partition (compiled with numba).

Single-node moves stall once every boundary node is locally optimal: a geometric cut that
crosses a dense region of a graded mesh cannot slide to a sparse region one node at a time
without passing through worse states. This module refines on a hierarchy of coarser graphs, as
METIS and KaFFPa do when they uncoarsen, but starting from the given (geometric) partition:

1. coarsen: heavy-edge matching restricted to edges *inside* a part, so every coarse node lies in
   one part and the coarse cut equals the fine cut; coarse node and edge weights are sums;
2. at the coarsest level, then at each finer one after projecting the parts down: move nodes out
   of parts above the bound (cheapest first), then k-way Fiduccia-Mattheyses passes (gain heap,
   hill climbing with rollback to the best prefix). Moving one coarse node moves a cluster.

The first V-cycle matches across parts (as METIS coarsens) and starts its coarsest level from
each cluster's majority part and, as a second try, from parts regrown out of those by greedy graph
growing; the lower refined cut goes on. Later V-cycles match inside parts, from the best result
so far. Matching rates an edge by its weight over the product of its end nodes' weights, so
clusters stay even. Rebalancing passes a part's excess only towards parts with room. Last,
the pieces a part fell into (connected components beyond its heaviest) are merged into the
neighbouring part they share most edges with, where the bound allows.

The kernels (:mod:`meshshard.partitioners._refine_numba`) are sequential with hashed
tie-breaks: the same input and seed give the same partition.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from meshshard.partitioners import _refine_numba as K
from meshshard.partitioners._graph import csr_view

__all__ = ["multilevel_refine", "part_components"]

#: coarsening stops below this many nodes per part
_COARSE_NODES_PER_PART = 30
#: a coarse level is used only if matching shrank the graph below this fraction
_MIN_SHRINK = 0.9
#: FM stops a pass after max(_STALL, level nodes // _STALL_DIV) moves without a new best cut
#: (the coarsest level: after as many moves as it has nodes)
_STALL, _STALL_DIV = 64, 50
#: FM passes per level, at most; a pass that removes less than _MIN_GAIN of the cut is the last
_PASSES, _MIN_GAIN = 4, 1e-3
#: default coarse_imbalance - imbalance (measured on the gmsh family at ~10k nodes: +0.03 left the worst
#: refined cut at 1.22x METIS's, +0.09 at 1.13x, +0.14 at 1.18x)
_COARSE_SLACK = 0.09
#: at the coarsest level, pieces of parts may merge into neighbours up to this x the mean weight
#: before rebalancing (measured: the fragmented parts of space-filling curves need it)
_REPAIR_SLACK = 1.3


def _csr(edge_index: np.ndarray, n: int, edge_weights: Optional[np.ndarray]):
    ei = np.ascontiguousarray(edge_index, dtype=np.int64)
    w = np.ones(ei.shape[1]) if edge_weights is None else np.ascontiguousarray(edge_weights, dtype=np.float64)
    return K.build_csr(ei[0], ei[1], w, n)


def part_components(assignment: np.ndarray, edge_index: np.ndarray, num_parts: Optional[int] = None) -> np.ndarray:
    """Connected components of each part's induced subgraph, counted per part.

    Args:
        assignment: int ``[N]`` part ids.
        edge_index: int64 ``[2, E]`` graph, one or both directions.
        num_parts: ``P`` (default: ``max id + 1``).

    Returns:
        int64 ``[P]``: the number of connected pieces of every part (0 for an empty part).
    """
    a = np.ascontiguousarray(assignment, dtype=np.int64)
    n = a.shape[0]
    p = (int(a.max()) + 1 if n else 0) if num_parts is None else int(num_parts)
    if n == 0:
        return np.zeros(p, dtype=np.int64)
    # a mesh's edge_index already is a symmetric CSR: use it as it is (no [2E] copies)
    csr = csr_view(np.asarray(edge_index), n)
    indptr, indices = csr if csr is not None else _csr(edge_index, n, None)[:2]
    label, count = K.label_components(indptr, indices, a)
    comp_part = np.zeros(count, dtype=np.int64)
    comp_part[label] = a
    return np.bincount(comp_part, minlength=p)


def multilevel_refine(
    assignment: np.ndarray,
    num_parts: int,
    edge_index: np.ndarray,
    weights: Optional[np.ndarray] = None,
    edge_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    coarse_imbalance: Optional[float] = None,
    cycles: int = 2,
    seed: int = 0,
    repair: bool = True,
) -> np.ndarray:
    """Refine ``assignment`` on a hierarchy of coarsened graphs (see the module docstring).

    Args:
        assignment: int ``[N]`` part ids (not modified).
        num_parts: number of parts ``P``.
        edge_index: int64 ``[2, E]`` graph, one or both directions.
        weights: optional float64 ``[N]`` node weights.
        edge_weights: optional float64 ``[E]`` non-negative edge weights (an edge given twice:
            the larger).
        imbalance: bound on ``max part weight / mean`` of the result. An input above it is
            rebalanced first; if that fails, the input is refined without ever moving a node
            into a part at or above the bound.
        coarse_imbalance: looser bound on the coarse levels, where nodes are heavy (default
            ``imbalance + 0.09``: clusters may then grow to 4.5% of a part, so coarsening goes deep
            enough for moves across thin layers); the finer levels rebalance to ``imbalance``.
        cycles: at most this many V-cycles, each from the best result so far with a new matching:
            the first matches across parts, the others inside parts; from the second on, the
            next runs only if this one lowered the cut.
        seed: varies the matching and the tie-breaks; the same input and seed give the same result.
        repair: merge the disconnected pieces of parts into neighbouring parts (see the module
            docstring).

    Returns:
        int64 ``[N]`` refined part ids; parts stay non-empty.
    """
    assign = np.array(assignment, dtype=np.int64, copy=True)
    n = assign.shape[0]
    if num_parts < 2 or n == 0 or edge_index.shape[1] == 0:
        return assign
    vw = np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    ew = None if edge_weights is None else np.asarray(edge_weights, dtype=np.float64)
    indptr, indices, data = _csr(edge_index, n, ew)
    mean = float(vw.sum()) / num_parts
    max_w = imbalance * mean * (1 + 1e-12)
    coarse_w = (imbalance + _COARSE_SLACK if coarse_imbalance is None else coarse_imbalance) * mean
    salt = int(seed) * 1_000_003
    if not K.rebalance(indptr, indices, data, vw, assign, num_parts, max_w, salt):
        assign = np.array(assignment, dtype=np.int64, copy=True)  # keep the input's balance, refine within it
        K.fm_refine(indptr, indices, data, vw, assign, num_parts, max_w, _PASSES, _STALL, _MIN_GAIN, salt)
        return assign
    best, best_cut = assign, K.cut_weight(indptr, indices, data, assign)
    for cycle in range(max(1, int(cycles))):
        out = _v_cycle(indptr, indices, data, vw, best.copy(), num_parts, max_w, max(coarse_w, max_w), salt + 7 * cycle,
                       free=cycle == 0)
        cut = K.cut_weight(indptr, indices, data, out)
        if cut < best_cut - 1e-9 * max(best_cut, 1.0):
            best, best_cut = out, cut
        elif cycle > 0:  # the first cycle (matched across parts) may fail where the next succeed
            break
    if repair:
        K.repair_components(indptr, indices, data, vw, best, num_parts, max_w)
    return best


def _coarsest(g, a, num_parts, bound, total, salt, grow):
    """Refine the coarsest level's parts ``a``; with ``grow``, also parts regrown from them by greedy graph
    growing (:func:`~meshshard.partitioners._refine_numba.grow_parts`), keeping the lower cut."""
    starts = [a, K.grow_parts(*g, a, num_parts, total / num_parts, salt)] if grow else [a]
    best, best_cut = a, np.inf
    for start in starts:
        K.repair_components(*g, start, num_parts, _REPAIR_SLACK * total / num_parts)
        K.rebalance(*g, start, num_parts, bound, salt)
        K.fm_refine(*g, start, num_parts, bound, _PASSES, g[0].shape[0] - 1, _MIN_GAIN, salt)
        cut = K.cut_weight(*g[:3], start)
        if cut < best_cut and np.bincount(start, weights=g[3], minlength=num_parts).max() <= bound:
            best, best_cut = start, cut
    return best


def _v_cycle(indptr, indices, data, vw, assign, num_parts, max_w, coarse_w, salt, free):
    """One V-cycle from a partition within ``max_w``; returns a partition within ``max_w``.

    ``free``: match across parts too (as METIS coarsens) and start the coarsest level from each
    cluster's majority part; else match inside parts only, so the coarsest level starts from
    ``assign`` itself.
    """
    levels = []
    coarsest = _COARSE_NODES_PER_PART * num_parts
    total = float(vw.sum())
    # a cluster must fit in the room the coarse bound leaves above the mean, or it could never move
    max_vw = max(float(vw.max()), min(1.5 * total / coarsest, 0.5 * (coarse_w - total / num_parts)))
    g = (indptr, indices, data, vw)
    a = np.zeros_like(assign) if free else assign.copy()  # assign stays the fallback
    to_coarse = np.arange(assign.shape[0])
    depth = 0
    while g[0].shape[0] - 1 > coarsest:
        cmap, nc = K.match_in_parts(*g, a, max_vw, salt * 131 + depth)
        if nc > _MIN_SHRINK * (g[0].shape[0] - 1):
            break
        levels.append((cmap, g))
        ca = np.empty(nc, dtype=np.int64)
        ca[cmap] = a
        g, a = K.contract(*g, cmap, nc), ca
        to_coarse = cmap[to_coarse]
        depth += 1
    if free:  # each coarsest node joins the part holding most of its weight
        # (sparse votes: a dense [nc, P] table would grow as P^2 where coarsening stalls early)
        keys, inverse = np.unique(to_coarse * num_parts + assign, return_inverse=True)
        coarse, part = np.divmod(keys, num_parts)
        order = np.lexsort((-np.bincount(inverse, weights=vw), coarse))  # heaviest part first (ties: lowest id)
        first = np.ones(order.shape[0], dtype=bool)
        first[1:] = coarse[order][1:] != coarse[order][:-1]
        a = np.empty(g[0].shape[0] - 1, dtype=np.int64)
        a[coarse[order][first]] = part[order][first]
        if np.unique(a).shape[0] < num_parts:  # a part lost every cluster: this cycle cannot help
            return assign
    for level in range(len(levels), -1, -1):
        if level < len(levels):
            cmap, g = levels[level]
            a = a[cmap]
        # the bound tightens level by level, so the finest level has little left to rebalance
        bound = max_w + (coarse_w - max_w) * level / max(len(levels), 1)
        nl = g[0].shape[0] - 1
        if level == len(levels):
            a = _coarsest(g, a, num_parts, bound, total, salt + level, grow=free)
            continue
        K.rebalance(*g, a, num_parts, bound, salt + level)
        K.fm_refine(*g, a, num_parts, bound, _PASSES, max(_STALL, nl // _STALL_DIV), _MIN_GAIN, salt + level)
    if np.bincount(a, weights=vw, minlength=num_parts).max() > max_w or np.bincount(a, minlength=num_parts).min() == 0:
        return assign  # the finest level could not restore the bound: keep the cycle's input
    return a
