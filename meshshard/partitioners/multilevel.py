r"""Multilevel boundary refinement: lower the edge cut of a given partition (compiled with numba).

Single-node moves stall once every boundary node is locally optimal: a geometric cut that
crosses a dense region of a graded mesh cannot slide to a sparse region one node at a time
without passing through worse states. This module refines on a hierarchy of coarser graphs, as
METIS and KaFFPa do when they uncoarsen, but starting from the given (geometric) partition:

1. coarsen: heavy-edge matching restricted to edges *inside* a part, so every coarse node lies in
   one part and the coarse cut equals the fine cut; coarse node and edge weights are sums;
2. at the coarsest level, then at each finer one after projecting the parts down: move nodes out
   of parts above the bound (cheapest first), then k-way Fiduccia-Mattheyses passes (gain heap,
   hill climbing with rollback to the best prefix), on a large finest level after a greedy sweep that takes every
   move of positive gain (as METIS refines). Moving one coarse node moves a cluster.

First, FM passes refine the (rebalanced) start itself on the finest level. The first V-cycle then
matches across parts (as METIS coarsens); its coarsest level starts from each cluster's majority part
in that refined start and, as further tries, from parts regrown by greedy graph growing out of those and
from a recursive bisection of the coarse graph (and, if the try of lowest cut left a part in pieces, from that
try with all its pieces merged into neighbours and rebalanced); the lowest cut (of the tries whose parts are
connected, if any) is uncoarsened level by level. The coarsest cut of a geometric start foretells the
final cut poorly, a refined start's parts do; and a deep hierarchy of a large regular mesh can lose to a
good start, so the refined start competes with the V-cycle's result and the lower cut is kept (a V-cycle
that matches inside parts is tried as well if the first ended above the bound). ``cycles > 1`` adds
V-cycles matched inside parts from the best result
while they lower the cut. Matching rates an edge by its weight over the product of its end nodes'
weights, so clusters stay even, and visits the nodes with a stride through the ids, so a sweep-like
numbering (a structured grid's) does not stretch the clusters (a large level strides through blocks of ids, which
stay in the cache, in ranges two threads share). The FM passes and rebalancing rounds
scan a list of candidates that holds every boundary node (projected from the coarser level, so no
level scans all its edges for it); coarse levels stop rebalancing after a few rounds (their heavy
nodes seldom fit exactly; the finer levels finish it), and the bound reaches ``imbalance`` one level
above the finest. Rebalancing
passes a part's excess only towards parts with room, guided by which parts touch at the coarsest
level. Last, the pieces a part fell into (connected components beyond its heaviest) are merged into
the neighbouring part they share most edges with, where the bound allows; pieces too large for that
(a part split in two) merge anyway and the overweight parts are rebalanced and refined again.

The kernels (:mod:`meshshard.partitioners._kernels`, :mod:`meshshard.partitioners._kernels.bisection`)
are sequential with hashed tie-breaks: the same input and seed give the same partition. The first
V-cycle matches across parts, so its coarse graphs do not depend on the start: :func:`multilevel_refine`
builds them on a second thread (:class:`~meshshard.partitioners._concurrent.Concurrent`) while the start
is computed (when given as a function), rebalanced and refined by FM on the calling thread. That saves time
on small and mid-sized meshes; on very large ones the start and the coarsening, both bound by memory, slow
each other down. The coarsest level's tries stay on one thread: they are short, and threads would compete.

``tries > 1`` runs more first V-cycles, each on its own hierarchy with its own salt, on threads beside the
first (each waits for the refined start through a :class:`~meshshard.partitioners._concurrent.Handoff`),
and keeps the lowest cut. The refined cut is a draw: moving only the matching's salt moves the cut, and a
try sharing the first's hierarchy draws too little (the draws need their own matchings). Two tries give a
lower mean and worst cut for more time (``bench_partition.py --only tries`` compares them).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from meshshard.partitioners import _concurrent
from meshshard.partitioners._concurrent import Concurrent, Handoff, HelpedHandoff, deliver
from meshshard.partitioners._csr import csr_view
from meshshard.partitioners._kernels.bisection import bisect_parts
from meshshard.partitioners._kernels import candidates, components, csr, greedy
from meshshard.partitioners._kernels import rebalance as rebalancing
from meshshard.partitioners._kernels.candidates import boundary_candidates, project_candidates
from meshshard.partitioners._kernels.coarsen import (coarse_ids, contract, contract_range, majority_parts, match_across,
                                                     match_in_parts, match_range)
from meshshard.partitioners._kernels.components import (join_across, label_components, label_components_edges,
                                                        union_in_range)
from meshshard.partitioners._kernels.csr import build_csr
from meshshard.partitioners._kernels.fm import fm_refine
from meshshard.partitioners._kernels.grow import grow_parts
from meshshard.partitioners._kernels.jit import any_layout
from meshshard.partitioners._kernels.rebalance import quotient_graph

__all__ = ["multilevel_refine", "part_components"]

# the finest level of an unweighted graph passes its edge weights as a zero-stride view (_unit_weights), the coarse
# levels as arrays: the kernels that read them on both take ``data`` typed for any layout, so each compiles once
rebalance = any_layout(rebalancing.rebalance, "data")
repair_components = any_layout(components.repair_components, "data")
candidate_cut = any_layout(candidates.candidate_cut, "data")
cut_weight = any_layout(csr.cut_weight, "data")
greedy_refine = any_layout(greedy.greedy_refine, "data")

#: coarsening stops below this many nodes per part
_COARSE_NODES_PER_PART = 30
#: a coarse level is used only if matching shrank the graph below this fraction
_MIN_SHRINK = 0.9
#: FM stops a pass after max(_STALL, level nodes // _STALL_DIV) moves without a new best cut (longer stalls gave
#: no better worst cut on the gmsh family, for more time)
_STALL, _STALL_DIV = 32, 100
#: ... and at most this many (the gmsh family, ~100k nodes and below, never reaches it): on the finest level of a
#: mesh of a million nodes, the longer stalls cost time for about the same cut
_STALL_CAP = 1000
#: a level of at least this many nodes is matched in blocks of ``_MATCH_BLOCK`` consecutive ids (see
#: :func:`~meshshard.partitioners._kernels.coarsen.visit_order`), in ``_PIECES`` ranges that two threads share: a
#: stride through all of its ids misses the cache at nearly every visit, and blocks a few times faster on a mesh of
#: a million nodes. Smaller levels, whose rows stay in the cache, keep the stride through all ids: the gmsh family
#: (up to 120k nodes), on which the refinement was tuned, coarsens as before
_LARGE_LEVEL = 1 << 17
_MATCH_BLOCK = 16384
#: the ranges a large level is matched in, and the most a large level is contracted in (see ``_SPLIT_NNZ``): more
#: than two, so the thread that waits for the hierarchy takes a share from whenever it comes (from the last range on)
_PIECES = 8
#: greedy sweeps (:func:`~meshshard.partitioners._kernels.greedy.greedy_refine`) before the FM passes of the finest
#: level of an uncoarsening, if it is a large level (``_LARGE_LEVEL``): they smooth the boundary projected from the
#: clusters' edges in one scan, and FM then does less (on the held-out meshes of ``bench_partition.py --only
#: heldout``, in less time for about the same cut); on the gmsh family's smaller meshes, whose FM passes cost little,
#: a sweep raised the mean cut
_GREEDY_SWEEPS = 1
#: FM passes on the finest level (and in the repair), at most; a pass that removes less than _MIN_GAIN of the cut is
#: the last (fewer passes left a higher mean cut on the gmsh family; these cost little more time)
_PASSES, _MIN_GAIN = 8, 1e-3
#: ... and on the coarse levels of an uncoarsening (the finest one keeps _PASSES): the finest level's FM does most of
#: the work, the coarse levels' later passes little, so fewer passes there keep the cut for less time
_COARSE_LEVEL_PASSES = 2
#: FM passes on the start before the V-cycle: as good a refined cut on the gmsh family as more passes, in less time
#: (fewer left some starts too poor for the V-cycle to recover)
_START_PASSES = 4
#: a level with at least this many CSR entries is contracted in ranges, one per this many entries (2 to ``_PIECES``),
#: when a second thread waits (_contract)
_SPLIT_NNZ = 100_000
#: part ids inside the refinement (the result is int64): FM and rebalancing read a neighbour's part per edge
#: (half the bytes of int64 per edge read; the same partitions)
_PART_DTYPE = np.int32
#: the edge weights handed to a kernel told that every edge weighs 1 (``unit``), which reads none
_NO_EDGE_DATA = np.empty(0)
#: default coarse_imbalance - imbalance (a tighter or a looser coarse bound left a worse worst refined cut on the
#: gmsh family)
_COARSE_SLACK = 0.09
#: rebalancing rounds on the coarse levels (the first moves nearly all the excess, later ones a heavy node a round;
#: the finest level rebalances without a cap): more rounds cost time for no better cut, none cut more
_COARSE_ROUNDS = 1
#: coarsest level of the first V-cycle: parts regrown this many times (from the start's parts, then from
#: the best so far), FM stalling after an eighth of the level's nodes (more regrows cost time for no better worst
#: cut on the gmsh family, one raised the mean cut; stalling after all nodes cost time for the same cuts)
_REGROWS, _COARSEST_STALL_DIV = 2, 8
#: ... with at most this many FM passes per try (more gave the same refined cuts on the gmsh family, fewer worse)
_COARSEST_PASSES = 4
#: the coarsest level of a V-cycle matched across parts tries recursive bisection of the coarse graph in place of
#: the second regrow, with this many seeds at the first bisection
#: (:func:`~meshshard.partitioners._kernels.bisection.bisect_parts`): a start of another kind that lowered the mean
#: refined cut and its tail on the gmsh family for little time; fewer seeds left a worse tail
_BISECT_TRIES = 8
#: with ``tries > 1``, try ``k`` salts its matching and tie-breaks with ``salt + k * _TRY_SALT``
_TRY_SALT = 7919
#: the edges between node ranges that union_in_range sets aside when the range ends at the last node: none
_NO_CROSS = np.empty(0, dtype=np.int64)
#: rebalance builds the parts' adjacency itself
_NO_QUOTIENT = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
#: at the coarsest level, pieces of parts may merge into neighbours up to this x the mean weight
#: before rebalancing (the fragmented parts of space-filling curves need it)
_REPAIR_SLACK = 1.3
#: a part split into pieces too large to merge within the bound is made whole by merging them anyway and
#: rebalancing, if the cut grows at most this much (on the gmsh family, every result with split parts became
#: connected within this bound)
_FORCED_REPAIR_CUT = 1.1


def _stall(n: int) -> int:
    """FM's stall limit on a level of ``n`` nodes (see ``_STALL`` and ``_STALL_CAP``)."""
    return max(_STALL, min(n // _STALL_DIV, _STALL_CAP))


def _to_coarsest(levels, n: int) -> np.ndarray:
    """Each finest-level node's (of ``n``) node on the coarsest level: the cluster maps composed from the
    coarsest down, so each step gathers one level's nodes (composing from the finest gathers ``n`` per level)."""
    if not levels:
        return np.arange(n)
    down = levels[-1][0]
    for cmap, _ in reversed(levels[:-1]):
        down = down[cmap]
    return down


def _csr(edge_index: np.ndarray, n: int, edge_weights: Optional[np.ndarray]):
    """``(indptr int64 [n + 1], indices [nnz], data float64 [nnz])``: the symmetric CSR the kernels take, its
    ``indices`` int32 where the node ids fit (the coarse levels keep the type); ``data`` of an unweighted graph is
    :func:`_unit_weights`."""
    if edge_weights is None:  # a mesh's edge_index already is the CSR: no [E] copies, no build
        view = csr_view(np.asarray(edge_index), n)
        if view is not None:
            return view[0], _narrow(view[1], n), _unit_weights(view[1].shape[0])
    ei = np.ascontiguousarray(edge_index, dtype=np.int64)
    # the kernels do not check bounds: bad ids or weights would be read and written past the arrays
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"multilevel_refine: edge_index must have shape [2, E], got {list(ei.shape)}")
    if ei.size and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(f"multilevel_refine: edge_index holds node ids outside [0, {n}): {int(ei.min())}..{int(ei.max())}")
    if edge_weights is not None and edge_weights.shape != (ei.shape[1],):
        raise ValueError(f"multilevel_refine: edge_weights has shape {list(edge_weights.shape)}, expected [{ei.shape[1]}]")
    w = np.empty(0) if edge_weights is None else np.ascontiguousarray(edge_weights, dtype=np.float64)
    indptr, indices, data = build_csr(ei[0], ei[1], w, n)
    return indptr, _narrow(indices, n), _unit_weights(indices.shape[0]) if edge_weights is None else data


def _unit_weights(nnz: int) -> np.ndarray:
    """``nnz`` edge weights of 1 that take no memory: a read-only view of one float64 with stride 0, so every read
    of an edge's weight hits one cache line, and no ``[nnz]`` array is built (8 bytes per CSR entry); the same
    partitions as ``np.ones``."""
    return np.broadcast_to(np.float64(1.0), (nnz,))


def _narrow(indices: np.ndarray, n: int) -> np.ndarray:
    """``indices`` as int32 when ids below ``n`` fit (int32 ones as they are): the kernels then read half the bytes
    per edge, and the matching's cluster maps follow the type (the same partitions)."""
    return indices.astype(np.int32, copy=False) if n <= np.iinfo(np.int32).max else indices


def part_components(assignment: np.ndarray, edge_index: np.ndarray, num_parts: Optional[int] = None) -> np.ndarray:
    """Connected components of each part's induced subgraph, counted per part.

    Args:
        assignment: int ``[N]`` part ids.
        edge_index: int64 ``[2, E]`` graph, one or both directions.
        num_parts: ``P`` (default: ``max id + 1``).

    Returns:
        int64 ``[P]``: the number of connected pieces of every part (0 for an empty part).

    Raises:
        ValueError: ``edge_index`` is not ``[2, E]`` or holds ids outside ``[0, N)``.
    """
    a = np.ascontiguousarray(assignment, dtype=np.int64)
    n = a.shape[0]
    p = (int(a.max()) + 1 if n else 0) if num_parts is None else int(num_parts)
    if n == 0:
        return np.zeros(p, dtype=np.int64)
    # union-find over the edge list as it is: no CSR to build or check (on a large mesh the CSR check
    # alone takes as long as the whole union-find)
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(ei.shape)}")
    if ei.shape[1] and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(f"edge_index holds node ids outside [0, {n}): {int(ei.min())}..{int(ei.max())}")
    label, count = label_components_edges(ei[0], ei[1], a)
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
    cycles: int = 1,
    seed: int = 0,
    repair: bool = True,
    num_nodes: Optional[int] = None,
    tries: int = 1,
) -> np.ndarray:
    """Refine ``assignment`` on a hierarchy of coarsened graphs (see the module docstring).

    Args:
        assignment: int ``[N]`` part ids in ``[0, P)`` (not modified), or a function of no arguments
            that returns them (then give ``num_nodes``): it runs while a second thread builds the CSR
            and the first V-cycle's coarse graphs, which do not depend on the start (with one usable
            CPU, or ``MESHSHARD_THREADS=1``, one after the other on the calling thread; same result).
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
        cycles: at most this many V-cycles (default 1), each from the best result so far with a
            new matching: the first matches across parts, the others inside parts, each only while
            the one before lowered the cut.
        seed: varies the matching and the tie-breaks; the same input and seed give the same result.
        repair: merge the disconnected pieces of parts into neighbouring parts, rebalancing
            when they do not fit (see the module docstring); a part stays split only where the
            graph itself is, or where making it whole would leave a part above ``imbalance`` or
            cost more than 10% more cut.
        num_nodes: ``N``, required when ``assignment`` is a function.
        tries: independent first V-cycles, each matching its own hierarchy with its own salt; the
            lowest cut is kept (the ties: the first). The tries after the first run on threads beside
            it (their result does not depend on the threads). ``tries=2`` lowers the mean cut for more time
            (``bench_partition.py --only tries`` compares them).

    Returns:
        int64 ``[N]`` refined part ids; parts stay non-empty.

    Raises:
        ValueError: ``tries`` is not an int >= 1; ``assignment`` is a function and ``num_nodes`` is
            missing; the start is not ``[N]`` or holds ids outside ``[0, P)`` (or is not integer).
    """
    if isinstance(tries, bool) or not isinstance(tries, (int, np.integer)) or tries < 1:
        raise ValueError(f"multilevel_refine: tries must be an int >= 1, got {tries!r}")
    if callable(assignment):
        if num_nodes is None:
            raise ValueError("multilevel_refine: give num_nodes when assignment is a function")
        start, n = assignment, int(num_nodes)
    else:
        start, n = None, np.asarray(assignment).shape[0]
    if num_parts < 2 or n == 0 or edge_index.shape[1] == 0:
        return _start_array(assignment if start is None else start(), n, num_parts).astype(np.int64)
    vw = np.ones(n) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    ew = None if edge_weights is None else np.asarray(edge_weights, dtype=np.float64)
    mean = float(vw.sum()) / num_parts
    max_w = imbalance * mean * (1 + 1e-12)
    coarse_w = (imbalance + _COARSE_SLACK if coarse_imbalance is None else coarse_imbalance) * mean
    salt = int(seed) * 1_000_003
    unit = weights is None and edge_weights is None  # the finest level's matching then reads no weights
    # the CSR and the first V-cycle's coarse graphs (it matches across parts) do not depend on the start: a
    # second thread builds them, handing the CSR over as soon as it is built, while the start is computed,
    # rebalanced and refined here
    # (with a second CPU this thread, done with the start, helps contract the levels: see _contract)
    levels_ready = HelpedHandoff(helped=_concurrent.second_cpu())
    graph, bisected, handoff, whole = Handoff(), Handoff(), Handoff(), Handoff()
    free_levels = Concurrent(_graph_and_hierarchy, graph, levels_ready, bisected, whole, edge_index, n, ew, vw,
                             num_parts, max_w, max(coarse_w, max_w), salt, unit)
    if not free_levels.threaded:  # one CPU: the CSR first, the hierarchy when it is asked for
        graph.put(_csr(edge_index, n, ew))
    # the other tries build their own hierarchies now too and wait for the refined start (on ``handoff``)
    others = [Concurrent(_first_cycle, graph, vw, handoff, num_parts, max_w, max(coarse_w, max_w),
                         salt + k * _TRY_SALT, unit) for k in range(1, int(tries))]
    try:
        initial = _start_array(assignment if start is None else start(), n, num_parts)
        indptr, indices, data = graph.get()
        assign = initial.copy()
        cands = boundary_candidates(indptr, indices, assign)
        balanced = rebalance(indptr, indices, data, vw, assign, num_parts, max_w, salt, -1, *cands, *_NO_QUOTIENT)
        if balanced:
            best, best_cut = assign, candidate_cut(indptr, indices, data, assign, cands[1], cands[2][0])
            # FM passes on the start itself, while the second thread coarsens: the refined start seeds the
            # V-cycles' coarsest levels and competes with their results. This replaced a second uncoarsening from
            # the majority parts of a first one (stopped at an eighth of the nodes, one FM pass per level) and FM
            # on the start only when it cut little more than the V-cycle's result: about as good a cut with a
            # better worst case, in less time (keeping the second uncoarsening as well took more time than either)
            refined = assign.copy()
            refined_cut = fm_refine(indptr, indices, data, vw, refined, num_parts, max_w, _START_PASSES,
                                      _stall(n), _MIN_GAIN, salt + 3, *cands)
    except BaseException:
        handoff.put(None)  # the tries' threads stop instead of waiting
        whole.put(None)
        raise
    if not balanced:
        handoff.put(None)
        whole.put(None)
        assign = initial  # keep the input's balance, refine within it
        fm_refine(indptr, indices, data, vw, assign, num_parts, max_w, _PASSES, _stall(n), _MIN_GAIN, salt,
                    *boundary_candidates(indptr, indices, assign))
        return assign.astype(np.int64)
    handoff.put(refined.copy())  # each try copies it again: no write reaches another
    whole.put(refined if repair and free_levels.threaded else None)  # it reads the refined start, never writes
    free = True
    for cycle in range(max(1, int(cycles))):
        results = [_v_cycle(indptr, indices, data, vw, (refined if cycle == 0 else best).copy(), num_parts, max_w,
                            max(coarse_w, max_w), salt + 7 * cycle, free=free,
                            built=_hierarchy_from(free_levels, levels_ready) if cycle == 0 else None,
                            bisected=bisected.get if cycle == 0 else None)]
        if cycle == 0 and others:
            results = [min(results + [t.result() for t in others], key=lambda r: r[1])]  # the first of equal cuts
        if cycle == 0:
            if not np.isfinite(results[0][1]):  # nothing within the bound: a V-cycle matched inside the parts
                results.append(_v_cycle(indptr, indices, data, vw, refined.copy(), num_parts, max_w,
                                        max(coarse_w, max_w), salt + 3, free=False))
            results.append((refined, refined_cut))
        improved = False
        for out, cut in results:
            if cut < best_cut - 1e-9 * max(best_cut, 1.0):
                best, best_cut, improved = out, cut, True
        if not (free or improved):
            break
        free = False
    # the second thread checked whether every part of the refined start is in one piece: if it won, repairing
    # it changes nothing
    if repair and not (best is refined and free_levels.threaded and free_levels.result()):
        best = _repair(indptr, indices, data, vw, best, num_parts, max_w, salt + 5)
    return best.astype(np.int64, copy=False)


def _graph_and_hierarchy(graph, levels_ready, bisected, refined, edge_index, n, ew, vw, num_parts, max_w, coarse_w,
                         salt, unit):
    """The second thread's work, none of which the start decides: the CSR of ``edge_index`` (put on the
    :class:`~meshshard.partitioners._concurrent.Handoff` ``graph`` for the caller and the other tries, unless the
    caller put it already), the first V-cycle's :func:`_hierarchy` of it (matched across parts; put on
    ``levels_ready``), the :func:`_bisection_try` of its coarsest level (put on ``bisected``: the caller makes
    the other tries meanwhile; the arguments as :func:`_v_cycle` gets them), then, while the caller uncoarsens,
    -> whether every part of the refined start that the Handoff ``refined`` brings is in one piece (False when
    it brings None): if that start wins, repairing it changes nothing. An error is handed to the caller on the
    Handoff it waits on. (Built by the caller, the CSR and its check sat on the critical path before the
    coarsening could start.)"""
    if not graph.ready():
        deliver(graph, _csr, edge_index, n, ew)
    levels, g, _ = deliver(levels_ready, _hierarchy, *graph.get(), vw, None, num_parts, coarse_w, salt, unit,
                           levels_ready)
    bound, coarsest_salt = _coarsest_bound_and_salt(len(levels), max_w, coarse_w, salt)
    deliver(bisected, _bisection_try, g, num_parts, bound, float(vw.sum()), coarsest_salt)
    start = refined.get()
    if start is None:
        return False
    indptr, indices, _ = graph.get()
    return label_components(indptr, indices, start)[1] == num_parts  # parts never empty: one piece each


def _hierarchy_from(free_levels, levels_ready):
    """The first V-cycle's hierarchy, made by :func:`_graph_and_hierarchy` (on its thread, or now with one CPU)."""
    if not free_levels.threaded:
        free_levels.result()  # one CPU: the hierarchy and the bisection try are made now
    return levels_ready.get()


def _coarsest_bound_and_salt(top: int, max_w: float, coarse_w: float, salt: int):
    """``(bound, salt)`` of the coarsest level of a hierarchy of ``top`` levels: the coarse bound unless the graph did
    not coarsen at all (the bisection try made beforehand must get what :func:`_v_cycle` gives the others)."""
    return max_w + (coarse_w - max_w) * (top > 0), salt + top


def _first_cycle(graph, vw, handoff, num_parts, max_w, coarse_w, salt, unit=False):
    """One more try of the first V-cycle (see ``tries``): its own hierarchy of the CSR that ``graph`` brings, then,
    from the refined start that ``handoff`` brings, one uncoarsening -> ``(parts, cut)`` as :func:`_v_cycle`; None
    if the start (or the CSR) is."""
    try:
        got = graph.get()
    except BaseException:  # the caller raises it
        return None
    built = _hierarchy(*got, vw, None, num_parts, coarse_w, salt, unit)
    assign = handoff.get()
    if assign is None:
        return None
    return _v_cycle(*got, vw, assign.copy(), num_parts, max_w, coarse_w, salt, free=True, built=built)


def _start_array(assignment, n: int, num_parts: int) -> np.ndarray:
    """The start as a fresh ``_PART_DTYPE`` ``[n]`` array (the caller's is never modified), its ids checked."""
    assign = np.array(assignment, copy=True)
    if assign.shape != (n,):
        raise ValueError(f"multilevel_refine: the start has shape {list(assign.shape)}, expected [{n}]")
    if n and (assign.dtype.kind not in "iu" or int(assign.min()) < 0 or int(assign.max()) >= max(num_parts, 1)):
        raise ValueError(f"multilevel_refine: the start must hold integer part ids in [0, {max(num_parts, 1)}), got "
                         + (f"dtype {assign.dtype}" if assign.dtype.kind not in "iu"
                            else f"{int(assign.min())}..{int(assign.max())}"))
    return assign.astype(_PART_DTYPE, copy=False)


def _hierarchy(indptr, indices, data, vw, parts, num_parts: int, coarse_w: float, salt: int, unit: bool = False,
               helper=None):
    """Match and contract the graph until it has at most ``_COARSE_NODES_PER_PART * num_parts`` nodes or
    stops shrinking -> ``(levels, coarsest graph, its parts)``; ``levels[i] = (cluster map, graph)`` of
    level ``i``. ``parts``: match inside these parts, or None to match across parts (the first V-cycle's
    hierarchy, which therefore does not depend on the start). ``unit``: every node and edge of the graph
    weighs 1 (the finest level's matching then reads no weights). ``helper``: a
    :class:`~meshshard.partitioners._concurrent.HelpedHandoff` whose waiter may contract half of a large level
    (see :func:`_contract`)."""
    coarsest = _COARSE_NODES_PER_PART * num_parts
    total = float(vw.sum())
    # a cluster must fit in the room the coarse bound leaves above the mean, or it could never move
    max_vw = max(float(vw.max()), min(1.5 * total / coarsest, 0.5 * (coarse_w - total / num_parts)))
    g = (indptr, indices, data, vw)
    a = np.empty(0, dtype=_PART_DTYPE) if parts is None else parts.astype(_PART_DTYPE)  # empty: one part
    levels = []
    depth = 0
    while g[0].shape[0] - 1 > coarsest:
        unit_level = unit and depth == 0
        # a unit level's matching and contraction read no edge weights: they get an empty C array in place of the
        # zero-stride view, so numba compiles them for one layout (a shorter first compilation)
        read = (g[0], g[1], _NO_EDGE_DATA, g[3]) if unit_level else g
        cmap, nc, mate = _match(read, a, max_vw, salt * 131 + depth, unit_level, helper)
        if nc > _MIN_SHRINK * (g[0].shape[0] - 1):
            break
        levels.append((cmap, g))
        if a.shape[0]:
            ca = np.empty(nc, dtype=a.dtype)
            ca[cmap] = a
            a = ca
        g = _contract(read, cmap, mate, nc, helper, unit_level)
        depth += 1
    return levels, g, a if a.shape[0] else np.zeros(g[0].shape[0] - 1, dtype=_PART_DTYPE)


def _match(g, a, max_vw, salt, unit, helper=None):
    """:func:`~meshshard.partitioners._kernels.coarsen.match_in_parts` of the graph ``g``; a level of at least
    ``_LARGE_LEVEL`` nodes is matched in blocks of ``_MATCH_BLOCK`` ids, as ``_PIECES`` id ranges, each among itself
    (:func:`~meshshard.partitioners._kernels.coarsen.match_range`, shared with the thread waiting on ``helper``, if
    any: see :func:`_pieces`), then across the borders between them
    (:func:`~meshshard.partitioners._kernels.coarsen.match_across`): the same matching whoever runs each range."""
    n = g[0].shape[0] - 1
    if n < _LARGE_LEVEL:
        return match_in_parts(*g, a, max_vw, salt, unit)
    chunk = -(-n // _PIECES)
    mate = np.full(n, -1, dtype=g[1].dtype)
    _pieces(helper, [(match_range, (*g, a, max_vw, salt, unit, _MATCH_BLOCK, lo, min(lo + chunk, n), mate))
                     for lo in range(0, n, chunk)])
    match_across(*g, a, max_vw, salt, unit, chunk, mate)
    return coarse_ids(mate)


def _pieces(helper, work):
    """Run every ``(fn, args)`` of ``work`` -> their results, in order: with a ``helper``
    (:class:`~meshshard.partitioners._concurrent.HelpedHandoff` whose waiter is idle), all but the first are offered
    to the waiter, which takes them from the last on, while this thread runs them from the first on, taking back
    those not yet taken (so the two share the work whenever the waiter comes)."""
    if helper is None or not helper.helped or len(work) < 2:
        return [fn(*args) for fn, args in work]
    offered = [helper.offer(fn, *args) for fn, args in work[1:]]
    fn, args = work[0]
    return [fn(*args)] + [helper.collect(piece) for piece in offered]


def _contract(g, cmap, mate, nc, helper=None, unit=False):
    """:func:`~meshshard.partitioners._kernels.coarsen.contract` of the graph ``g``; with a ``helper``
    (:class:`~meshshard.partitioners._concurrent.HelpedHandoff`) and at least ``_SPLIT_NNZ`` entries, the rows are
    contracted in ranges (see ``_SPLIT_NNZ``) shared with the thread waiting for the hierarchy (see :func:`_pieces`: it
    idles there while the coarsening, longer than its own work, goes on), the same graph either way. ``unit``: every
    edge of ``g`` weighs 1 (its weights are not read)."""
    n = cmap.shape[0]
    if helper is None or not helper.helped or g[1].shape[0] < _SPLIT_NNZ:
        return contract(*g, cmap, mate, nc, unit)
    chunk = -(-n // max(2, min(_PIECES, g[1].shape[0] // _SPLIT_NNZ)))
    parts = _pieces(helper, [(contract_range, (*g, cmap, mate, nc, lo, min(lo + chunk, n), unit))
                             for lo in range(0, n, chunk)])
    offsets = np.cumsum([0] + [p[0][-1] for p in parts[:-1]])
    indptr = np.concatenate([parts[0][0][:1]] + [p[0][1:] + off for p, off in zip(parts, offsets)])
    return (indptr, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
            np.concatenate([p[3] for p in parts]))


def _pieces_of_parts(indptr, indices, assign: np.ndarray) -> int:
    """The number of connected pieces of all parts together (:func:`~meshshard.partitioners._kernels.components.
    label_components`'s count), the halves of the node ids joined at once on two threads (the count does not depend
    on the threads)."""
    n = assign.shape[0]
    parent = np.arange(n, dtype=np.int64)
    mid = n // 2
    upper = Concurrent(union_in_range, indptr, indices, assign, parent, mid, n, _NO_CROSS)  # no node above n
    cross = np.empty(2 * int(indptr[mid]), dtype=np.int64)
    k = union_in_range(indptr, indices, assign, parent, 0, mid, cross)
    upper.result()
    return join_across(parent, cross, k)


def _repair(indptr, indices, data, vw, assign: np.ndarray, num_parts: int, max_w: float, salt: int) -> np.ndarray:
    """Parts made whole: ``assign`` with its pieces merged into neighbouring parts (may be ``assign`` itself).

    Pieces that fit their best neighbour within ``max_w`` merge into it. If some do not (a part split into two
    large pieces), every piece merges regardless, the overweight parts are rebalanced and FM passes follow;
    that result is kept when it is within the bound, has fewer pieces and cuts at most ``_FORCED_REPAIR_CUT``
    times as much. Pieces with no edge to another part (a separate component of the graph) stay. The usual case, every
    part in one piece, is told first by :func:`_pieces_of_parts`, on two threads.
    """
    if _pieces_of_parts(indptr, indices, assign) == np.count_nonzero(np.bincount(assign, minlength=num_parts)):
        return assign
    left = repair_components(indptr, indices, data, vw, assign, num_parts, max_w)
    if left == 0:
        return assign
    forced = assign.copy()
    repair_components(indptr, indices, data, vw, forced, num_parts, np.inf)
    cands = boundary_candidates(indptr, indices, forced)
    if not rebalance(indptr, indices, data, vw, forced, num_parts, max_w, salt, -1, *cands, *_NO_QUOTIENT):
        return assign
    fm_refine(indptr, indices, data, vw, forced, num_parts, max_w, _PASSES, _stall(forced.shape[0]), _MIN_GAIN, salt,
                *cands)
    if repair_components(indptr, indices, data, vw, forced, num_parts, max_w) >= left:
        return assign
    before = cut_weight(indptr, indices, data, assign)
    if cut_weight(indptr, indices, data, forced) > _FORCED_REPAIR_CUT * before:
        return assign
    return forced


def _coarsest(g, a, num_parts, bound, total, salt, grow, bisect=False, bisected=None):
    """Refine the coarsest level's parts ``a``; with ``grow``, also parts regrown by greedy graph growing
    (:func:`~meshshard.partitioners._kernels.grow.grow_parts`) from ``a`` and then from the best result so far
    (with ``bisect``, the second regrow gives way to recursive bisection of the graph,
    :func:`~meshshard.partitioners._kernels.bisection.bisect_parts`; ``bisected``, a function of no arguments, may
    bring that try made beforehand by :func:`_bisection_try`), and, if the try of lowest cut left a part in pieces,
    that try with all its pieces merged into neighbours and rebalanced (on the gmsh vessel, hilbert's tries all
    kept a part in two halves too heavy to merge within ``_REPAIR_SLACK``). Merging only when every try was in
    pieces, a lower cut in pieces was passed over for a worse connected try; merging the lowest cut removed the
    worst runs on the gmsh family (the coarsest cut foretells the final one poorly, so a few others rose).
    Returns ``(parts, cands)`` (``cands``: its boundary candidates ``(listed, cand, count)``, see
    :func:`~meshshard.partitioners._kernels.candidates.boundary_candidates`) of the lowest cut within ``bound`` plus one
    node weight (coarse nodes are too heavy to balance exactly; the finer levels rebalance), of the tries whose
    parts are connected if any are (a connected coarsest partition refines to a lower cut than one in pieces);
    the first of equal tries."""
    limit = bound + float(g[3].max()) if grow else np.inf
    best = None  # (key, parts, cands): connected parts first, then the lowest cut
    lowest = None  # ((cut, in pieces), parts): the lowest cut, connected parts first on a tie

    def consider(tried):
        nonlocal best, lowest
        parts, cands, key = tried
        if key is not None and (best is None or key < best[0]):
            best = (key, parts, cands)
        if key is not None and (lowest is None or key[::-1] < lowest[0]):
            lowest = (key[::-1], parts)

    consider(_coarsest_try(g, a.copy(), num_parts, bound, total, salt, _REPAIR_SLACK, limit))
    if grow:
        consider(_coarsest_try(g, grow_parts(*g, a, num_parts, total / num_parts, salt + 101), num_parts, bound,
                               total, salt, _REPAIR_SLACK, limit))
        if bisect:
            consider(bisected() if bisected is not None else _bisection_try(g, num_parts, bound, total, salt))
        else:
            consider(_coarsest_try(g, grow_parts(*g, a if best is None else best[1], num_parts, total / num_parts,
                                                   salt + 202), num_parts, bound, total, salt, _REPAIR_SLACK, limit))
        if lowest is not None and lowest[0][1]:  # the lowest cut is in pieces: merge them all, then rebalance
            consider(_coarsest_try(g, lowest[1].copy(), num_parts, bound, total, salt, np.inf, limit))
    if best is None:  # no try within the limit: the finer levels rebalance the start's
        start = a.astype(_PART_DTYPE)
        return start, boundary_candidates(*g[:2], start)
    return best[1], best[2]


def _coarsest_try(g, start, num_parts, bound, total, salt, slack, limit):
    """One try of :func:`_coarsest` from the parts ``start`` (modified): pieces merged into neighbours up to
    ``slack`` x the mean part weight, rebalanced to ``bound``, FM passes -> ``(parts, cands, key)``; ``key``
    ``(in pieces, cut)`` orders the tries (a part in pieces here stays in pieces: FM moves nodes, not pieces, so
    connected parts come first), None when a part ends above ``limit``."""
    # the starts (grown, bisected: int64) take the finer levels' part type, so the kernels compile for one type
    start = start.astype(_PART_DTYPE, copy=False)
    repair_components(*g, start, num_parts, slack * total / num_parts)
    cands = boundary_candidates(*g[:2], start)
    rebalance(*g, start, num_parts, bound, salt, -1, *cands, *_NO_QUOTIENT)
    stall = max(_STALL // 2, (g[0].shape[0] - 1) // _COARSEST_STALL_DIV)
    cut = fm_refine(*g, start, num_parts, bound, _COARSEST_PASSES, stall, _MIN_GAIN, salt, *cands)
    if np.bincount(start, weights=g[3], minlength=num_parts).max() > limit:
        return start, cands, None
    return start, cands, (label_components(g[0], g[1], start)[1] > num_parts, cut)


def _bisection_try(g, num_parts, bound, total, salt):
    """The try of :func:`_coarsest` that starts from a recursive bisection of the coarsest graph ``g``: it does not
    depend on the start, so the hierarchy's thread makes it while the caller tries the others."""
    return _coarsest_try(g, bisect_parts(*g, num_parts, _BISECT_TRIES, salt), num_parts, bound, total, salt,
                         _REPAIR_SLACK, bound + float(g[3].max()))


def _refine_level(levels, level, a, listed, quotient, num_parts, max_w, coarse_w, salt):
    """Project ``a`` and its boundary candidates ``listed`` from level ``level + 1`` to ``level`` and refine it
    there (at most ``_PASSES`` FM passes on the finest level, ``_COARSE_LEVEL_PASSES`` on the others) ->
    ``(parts, listed, cut)``. ``quotient``: the parts' adjacency
    that guides rebalancing (see :func:`~meshshard.partitioners._kernels.rebalance.quotient_graph`)."""
    cmap, g = levels[level]
    a = a[cmap].astype(_PART_DTYPE, copy=False)
    cands = project_candidates(cmap, listed)
    # the bound tightens level by level to max_w one level above the finest, so the finest level, the
    # largest, has little left to rebalance (less time than reaching max_w at the finest, the same cuts)
    bound = max_w + (coarse_w - max_w) * max(level - 1, 0) / max(len(levels) - 1, 1)
    rebalance(*g, a, num_parts, bound, salt + level, _COARSE_ROUNDS if level else -1, *cands, *quotient)
    if level == 0 and a.shape[0] >= _LARGE_LEVEL:
        greedy_refine(*g, a, num_parts, bound, _GREEDY_SWEEPS, *cands)
    cut = fm_refine(*g, a, num_parts, bound, _COARSE_LEVEL_PASSES if level else _PASSES, _stall(a.shape[0]),
                      _MIN_GAIN, salt + level, *cands)
    return a, cands[0], cut


def _v_cycle(indptr, indices, data, vw, assign, num_parts, max_w, coarse_w, salt, free, built=None, bisected=None):
    """One V-cycle from a partition within ``max_w`` -> ``(parts within max_w, their cut)``; ``(assign, inf)``
    when it ends above the bound.

    ``free``: match across parts too (as METIS coarsens) and start the coarsest level from each
    cluster's majority part of ``assign``, regrown parts and a recursive bisection (see
    :func:`_coarsest`); else match inside parts only, so the coarsest level starts from ``assign``
    itself. ``built`` (free only): the result of :func:`_hierarchy` for these arguments, made beforehand;
    ``bisected``: a function of no arguments that brings the coarsest level's bisection try, made beforehand too
    (see :func:`_coarsest`).
    """
    total = float(vw.sum())
    levels, g, a = built if built is not None else _hierarchy(indptr, indices, data, vw, None if free else assign,
                                                               num_parts, coarse_w, salt)
    top = len(levels)
    if free:
        a = majority_parts(_to_coarsest(levels, assign.shape[0]), assign, vw, g[0].shape[0] - 1, num_parts)
        if np.unique(a).shape[0] < num_parts:  # a part lost every cluster: this start cannot help
            return assign, np.inf
    bound, coarsest_salt = _coarsest_bound_and_salt(top, max_w, coarse_w, salt)
    a, (listed, cand, count) = _coarsest(g, a, num_parts, bound, total, coarsest_salt, grow=free, bisect=free,
                                         bisected=bisected)
    cut = cut_weight(indptr, indices, data, a) if top == 0 else np.inf
    # the parts' adjacency at the coarsest level guides rebalancing on every finer one (it costs a scan
    # of the boundary per level otherwise; moves seldom join new parts)
    quotient = quotient_graph(g[0], g[1], a, num_parts, cand, count[0])
    for level in range(top - 1, -1, -1):
        a, listed, cut = _refine_level(levels, level, a, listed, quotient, num_parts, max_w, coarse_w, salt)
    if np.bincount(a, weights=vw, minlength=num_parts).max() <= max_w and np.bincount(a, minlength=num_parts).min() > 0:
        return a, cut
    return assign, np.inf
