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
numbering (a structured grid's) does not stretch the clusters. The FM passes and rebalancing rounds
scan a list of candidates that holds every boundary node (projected from the coarser level, so no
level scans all its edges for it); coarse levels stop rebalancing after a few rounds (their heavy
nodes seldom fit exactly; the finer levels finish it), and the bound reaches ``imbalance`` one level
above the finest. Rebalancing
passes a part's excess only towards parts with room, guided by which parts touch at the coarsest
level. Last, the pieces a part fell into (connected components beyond its heaviest) are merged into
the neighbouring part they share most edges with, where the bound allows; pieces too large for that
(a part split in two) merge anyway and the overweight parts are rebalanced and refined again.

The kernels (:mod:`meshshard.partitioners._refine_numba`, :mod:`meshshard.partitioners._bisect_numba`)
are sequential with hashed tie-breaks: the same input and seed give the same partition. The first
V-cycle matches across parts, so its coarse graphs do not depend on the start: :func:`multilevel_refine`
builds them on a second thread (:class:`~meshshard.partitioners._concurrent.Concurrent`) while the start
is computed (when given as a function), rebalanced and refined by FM on the calling thread. Measured on 2
shared cores, before the start was refined there: 3-12% less time in sum at ~10k nodes (the gmsh family,
kdtree and hilbert, alternating in one process); no clear change at ~100k, nor on the 2M lattice (hilbert
and morton 4.1-5.0 s with the thread, 4.0-4.3 s without), where the start and the coarsening, both bound by
memory, slow each other down. Running the coarsest level's tries on threads as well was slower at ~10k:
those are short, and the threads competed.

``tries > 1`` runs more first V-cycles, each on its own hierarchy with its own salt, on threads beside the
first (each waits for the refined start through a :class:`~meshshard.partitioners._concurrent.Handoff`),
and keeps the lowest cut. The refined cut is a draw: the same algorithm with only the matching's salt moved
(three offsets, saved gmsh family, kdtree / hilbert / morton x seeds 0-5, 252 runs each) gave a mean cut /
METIS's of 0.980-0.987 and 1-10 runs above 1.15x (measured when a V-cycle still uncoarsened twice; a second
try sharing the first's hierarchy was not enough then: the draws need their own matchings). With two tries
(``bench_partition.py --only tries``, 2 shared cores, ~10k and ~100k family meshes, seeds 0-5, 28 Nov 2026):
kdtree's mean cut / METIS's 0.9453 against 0.9577, hilbert's 0.9625 against 0.9750, worst 1.04 / 1.10 against
1.10 / 1.11, for 1.40x and 1.45x the time (27 Nov, before the coarsest level merged its lowest-cut try in
pieces: hilbert's runs above 1.15x went from 2 of 84 to none, for 1.47x and 1.48x the time).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from meshshard.partitioners import _refine_numba as K
from meshshard.partitioners._bisect_numba import bisect_parts
from meshshard.partitioners import _concurrent
from meshshard.partitioners._concurrent import Concurrent, Handoff, HelpedHandoff, deliver
from meshshard.partitioners._graph import csr_view

__all__ = ["multilevel_refine", "part_components"]

#: coarsening stops below this many nodes per part
_COARSE_NODES_PER_PART = 30
#: a coarse level is used only if matching shrank the graph below this fraction
_MIN_SHRINK = 0.9
#: FM stops a pass after max(_STALL, level nodes // _STALL_DIV) moves without a new best cut (measured:
#: 32 and 100 gave the same worst cut on the gmsh family as 64 and 50, in 0.8-0.9x the time)
_STALL, _STALL_DIV = 32, 100
#: FM passes on the finest level (and in the repair), at most; a pass that removes less than _MIN_GAIN of the cut is
#: the last (measured on the gmsh family, seeds 0-1, when every level had them: 8 passes gave a mean refined cut of
#: 0.986x / 1.009x METIS's for kdtree / hilbert where 4 gave 0.997x / 1.023x, for about 3% more time; 3 passes
#: 1.015x / 1.043x)
_PASSES, _MIN_GAIN = 8, 1e-3
#: ... and on the coarse levels of an uncoarsening (the finest one keeps _PASSES): the finest level's FM does most of
#: the work (its cut ends ~0.85x the projected one, median over the gmsh family), the coarse levels' later passes
#: little. Measured on the gmsh family at ~10k and ~100k, kdtree / hilbert / morton x seeds 0-5 (252 runs): mean
#: refined cut / METIS's 0.9775 against 0.9768 with 8, runs above 1.15x 3 against 2 (the worst 1.33 against 1.30,
#: hilbert on the ~10k boundary layer, seed 5); 1 pass 0.9853; 4 passes on the finest level (8 on the others) 0.9903,
#: 6 (2 on the others) 0.9816. Time at ~10k (interleaved with METIS, median of 15, sum over the 7 meshes): 0.93x /
#: 0.94x the time with 8 (kdtree / hilbert)
_COARSE_LEVEL_PASSES = 2
#: FM passes on the start before the V-cycle. Measured on the saved gmsh family at ~10k and ~100k, kdtree / hilbert /
#: morton x seeds 0-5 (252 runs), once the coarsest level merged the pieces of its lowest-cut try: 4 passes gave a
#: mean refined cut / METIS's of 0.9740 against 0.9759 with 8 (3 passes 0.9750), the same worst runs and no forced
#: repair, in 0.96-0.97x the one-thread time at ~10k (no clear change with two threads: the start runs beside the
#: coarsening, which mostly takes longer). Before that change, 4 passes led a hilbert run on the ~10k vessel into
#: the forced repair (1.5x the time) and 2 passes left a hilbert cut at 1.17x.
_START_PASSES = 4
#: a level with at least this many CSR entries is contracted in two halves when a second thread waits (_contract)
_SPLIT_NNZ = 100_000
#: part ids inside the refinement (the result is int64): FM and rebalancing read a neighbour's part per edge
#: (measured on the gmsh family at ~10k and ~100k, kdtree and hilbert, alternating with int64 in one process:
#: 0.94x the time in sum over the meshes, the same partitions)
_PART_DTYPE = np.int32
#: the edge weights handed to a kernel told that every edge weighs 1 (``unit``), which reads none
_NO_EDGE_DATA = np.empty(0)
#: default coarse_imbalance - imbalance (measured on the gmsh family at ~10k nodes: +0.03 left the worst
#: refined cut at 1.22x METIS's, +0.09 at 1.13x, +0.14 at 1.18x)
_COARSE_SLACK = 0.09
#: rebalancing rounds on the coarse levels (the first moves nearly all the excess, later ones a heavy node a round;
#: the finest level rebalances without a cap). Measured on the gmsh family at ~10k and ~100k, kdtree / hilbert /
#: morton x seeds 0-5 (252 runs), after the refined start came in: 1 round gave a mean refined cut / METIS's of
#: 0.9517 / 0.9753 / 0.9803 against 0.9539 / 0.9780 / 0.9824 with 3 rounds, 2 runs above 1.15x against 3 (worst
#: 1.30 against 1.26, the same hilbert run), in 0.90-0.92x the time (sums over the meshes, alternating in one
#: process, two runs); 0 rounds cut more (0.9715 mean on seeds 0-2 against 0.9668) in no less time
_COARSE_ROUNDS = 1
#: coarsest level of the first V-cycle: parts regrown this many times (from the start's parts, then from
#: the best so far), FM stalling after an eighth of the level's nodes (measured on the gmsh family: 4
#: regrows cost 0.1x METIS's time more at ~10k nodes for no better worst cut, 1 regrow raised hilbert's
#: mean refined cut from 1.02 to 1.05x METIS's; stalling after all nodes cost 3x the time for the same cuts)
_REGROWS, _COARSEST_STALL_DIV = 2, 8
#: ... with at most this many FM passes per try (measured on the gmsh family, seeds 0-5: mean refined cut 0.989x
#: METIS's with 4 or 8, 14 / 15 of 252 runs above 1.1x, ~0.97x the time at ~10k nodes; 2 passes: 0.993x and 21)
_COARSEST_PASSES = 4
#: the coarsest level of a V-cycle matched across parts tries recursive bisection of the coarse graph in place of
#: the second regrow, with this many seeds at the first bisection
#: (:func:`~meshshard.partitioners._bisect_numba.bisect_parts`). Measured on the gmsh family (14 meshes, kdtree /
#: hilbert / morton, seeds 0-5), when the V-cycle still uncoarsened twice (see multilevel_refine's comment on the
#: refined start): the mean refined cut went from 1.004x METIS's to 0.986x, runs above 1.1x from 17 of 252 to 9,
#: for ~1% more time at ~10k nodes; 4 seeds gave 0.985x with a worse tail (1.27x), trying it on the second
#: uncoarsening's coarsest level too (4 seeds) 0.983x for more time. It won that coarsest level in about 60% of runs.
_BISECT_TRIES = 8
#: with ``tries > 1``, try ``k`` salts its matching and tie-breaks with ``salt + k * _TRY_SALT``
_TRY_SALT = 7919
#: rebalance builds the parts' adjacency itself
_NO_QUOTIENT = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
#: at the coarsest level, pieces of parts may merge into neighbours up to this x the mean weight
#: before rebalancing (measured: the fragmented parts of space-filling curves need it)
_REPAIR_SLACK = 1.3
#: a part split into pieces too large to merge within the bound is made whole by merging them anyway and
#: rebalancing, if the cut grows at most this much (measured on the gmsh family, 4/7/16 parts, seeds 0-2:
#: the 14 results with split parts all became connected, at 0.905-1.047x their cut)
_FORCED_REPAIR_CUT = 1.1


def _stall(n: int) -> int:
    """FM's stall limit on a level of ``n`` nodes (see ``_STALL``)."""
    return max(_STALL, n // _STALL_DIV)


def _to_coarsest(levels, n: int) -> np.ndarray:
    """Each finest-level node's (of ``n``) node on the coarsest level: the cluster maps composed from the
    coarsest down, so each step gathers one level's nodes (composing from the finest gathered ``n`` per level:
    2.6 ms against 0.55 ms for the 10 levels of the ~100k vessel's hierarchy)."""
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
    indptr, indices, data = K.build_csr(ei[0], ei[1], w, n)
    return indptr, _narrow(indices, n), _unit_weights(indices.shape[0]) if edge_weights is None else data


def _unit_weights(nnz: int) -> np.ndarray:
    """``nnz`` edge weights of 1 that take no memory: a read-only view of one float64 with stride 0, so every read
    of an edge's weight hits one cache line (the kernels are compiled once more for this layout). Measured on the
    saved gmsh family, kdtree and hilbert, alternating with ``np.ones`` in one process: the same partitions; sums of
    time / METIS's 1.099 / 1.163 -> 1.042 / 1.159 at ~10k with one thread, 0.777 / 0.699 -> 0.650 / 0.680 at ~100k
    with two; and no ``[nnz]`` array (8 bytes per CSR entry: 95 MB on the 2M-node hex lattice)."""
    return np.broadcast_to(np.float64(1.0), (nnz,))


def _narrow(indices: np.ndarray, n: int) -> np.ndarray:
    """``indices`` as int32 when ids below ``n`` fit: the kernels then read half the bytes per edge, and the
    matching's cluster maps follow the type (measured on the gmsh family at ~10k and ~100k nodes, kdtree and
    hilbert, alternating with int64 in one process: 0.91x and 0.94x the time in sum over the meshes in two runs,
    the same partitions)."""
    return indices.astype(np.int32) if n <= np.iinfo(np.int32).max else indices


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
    # union-find over the edge list as it is: no CSR to build or check (on a 2M-node mesh the CSR check alone
    # took as long as the whole union-find)
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {list(ei.shape)}")
    if ei.shape[1] and (int(ei.min()) < 0 or int(ei.max()) >= n):
        raise ValueError(f"edge_index holds node ids outside [0, {n}): {int(ei.min())}..{int(ei.max())}")
    label, count = K.label_components_edges(ei[0], ei[1], a)
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
            it (their result does not depend on the threads). Measured on 2 shared cores, kdtree and
            hilbert on the gmsh family at ~10k and ~100k nodes, seeds 0-5 (``bench_partition.py --only
            tries``): ``tries=2`` took 1.40x and 1.45x the time of ``tries=1`` and lowered the mean cut /
            METIS's from 0.958 to 0.945 (kdtree) and from 0.975 to 0.963 (hilbert).

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
        cands = K.boundary_candidates(indptr, indices, assign)
        balanced = K.rebalance(indptr, indices, data, vw, assign, num_parts, max_w, salt, -1, *cands, *_NO_QUOTIENT)
        if balanced:
            best, best_cut = assign, K.candidate_cut(indptr, indices, data, assign, cands[1], cands[2][0])
            # FM passes on the start itself, while the second thread coarsens: the refined start seeds the
            # V-cycles' coarsest levels and competes with their results. This replaced a second uncoarsening from
            # the majority parts of a first one (stopped at an eighth of the nodes, one FM pass per level) and FM
            # on the start only when it cut at most 1.1x the V-cycle's result. Measured on the gmsh family at ~10k
            # and ~100k nodes, 7 parts, kdtree / hilbert / morton x seeds 0-5 (252 runs): mean refined cut /
            # METIS's 0.9715 against 0.9682, 3 runs above 1.15x against 5 (worst 1.26 against 1.30), in 0.82x the
            # time at ~10k and 0.93x at ~100k (sums over the meshes, both alternating in one process). Keeping the
            # second uncoarsening as well gave 0.9648 and 4 runs above 1.15x, in more time than either.
            refined = assign.copy()
            refined_cut = K.fm_refine(indptr, indices, data, vw, refined, num_parts, max_w, _START_PASSES,
                                      _stall(n), _MIN_GAIN, salt + 3, *cands)
    except BaseException:
        handoff.put(None)  # the tries' threads stop instead of waiting
        whole.put(None)
        raise
    if not balanced:
        handoff.put(None)
        whole.put(None)
        assign = initial  # keep the input's balance, refine within it
        K.fm_refine(indptr, indices, data, vw, assign, num_parts, max_w, _PASSES, _stall(n), _MIN_GAIN, salt,
                    *K.boundary_candidates(indptr, indices, assign))
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
    Handoff it waits on. (The CSR's check took 12-21 ms on the lexicographically numbered ~100k vessel, on the
    critical path before the coarsening could start, when the caller built the CSR.)"""
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
    return K.label_components(indptr, indices, start)[1] == num_parts  # parts never empty: one piece each


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
        # zero-stride view, so numba compiles them for one layout (about 12 s less of the first compilation)
        read = (g[0], g[1], _NO_EDGE_DATA, g[3]) if unit_level else g
        cmap, nc, mate = K.match_in_parts(*read, a, max_vw, salt * 131 + depth, unit_level)
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


def _contract(g, cmap, mate, nc, helper=None, unit=False):
    """:func:`~meshshard.partitioners._refine_numba.contract` of the graph ``g``; with a ``helper``
    (:class:`~meshshard.partitioners._concurrent.HelpedHandoff`) and at least ``_SPLIT_NNZ`` entries, the second half
    of the rows is offered to the thread waiting for the hierarchy (it idles there while the coarsening, longer
    than its own work, goes on; its half is taken back if it is still busy), the same graph either way (measured,
    kdtree, best of 3: ~100k vessel 196 -> 155 ms, boundary layer 64 -> 56 ms, hex shell 86 -> 70 ms). ``unit``:
    every edge of ``g`` weighs 1 (its weights are not read)."""
    n = cmap.shape[0]
    if helper is None or not helper.helped or g[1].shape[0] < _SPLIT_NNZ:
        return K.contract(*g, cmap, mate, nc, unit)
    piece = helper.offer(K.contract_range, *g, cmap, mate, nc, n // 2, n, unit)
    first = K.contract_range(*g, cmap, mate, nc, 0, n // 2, unit)
    second = helper.collect(piece)
    return (np.concatenate((first[0], second[0][1:] + first[0][-1])), np.concatenate((first[1], second[1])),
            np.concatenate((first[2], second[2])), np.concatenate((first[3], second[3])))


def _repair(indptr, indices, data, vw, assign: np.ndarray, num_parts: int, max_w: float, salt: int) -> np.ndarray:
    """Parts made whole: ``assign`` with its pieces merged into neighbouring parts (may be ``assign`` itself).

    Pieces that fit their best neighbour within ``max_w`` merge into it. If some do not (a part split into two
    large pieces), every piece merges regardless, the overweight parts are rebalanced and FM passes follow;
    that result is kept when it is within the bound, has fewer pieces and cuts at most ``_FORCED_REPAIR_CUT``
    times as much. Pieces with no edge to another part (a separate component of the graph) stay.
    """
    left = K.repair_components(indptr, indices, data, vw, assign, num_parts, max_w)
    if left == 0:
        return assign
    forced = assign.copy()
    K.repair_components(indptr, indices, data, vw, forced, num_parts, np.inf)
    cands = K.boundary_candidates(indptr, indices, forced)
    if not K.rebalance(indptr, indices, data, vw, forced, num_parts, max_w, salt, -1, *cands, *_NO_QUOTIENT):
        return assign
    K.fm_refine(indptr, indices, data, vw, forced, num_parts, max_w, _PASSES, _stall(forced.shape[0]), _MIN_GAIN, salt,
                *cands)
    if K.repair_components(indptr, indices, data, vw, forced, num_parts, max_w) >= left:
        return assign
    before = K.cut_weight(indptr, indices, data, assign)
    if K.cut_weight(indptr, indices, data, forced) > _FORCED_REPAIR_CUT * before:
        return assign
    return forced


def _coarsest(g, a, num_parts, bound, total, salt, grow, bisect=False, bisected=None):
    """Refine the coarsest level's parts ``a``; with ``grow``, also parts regrown by greedy graph growing
    (:func:`~meshshard.partitioners._refine_numba.grow_parts`) from ``a`` and then from the best result so far
    (with ``bisect``, the second regrow gives way to recursive bisection of the graph,
    :func:`~meshshard.partitioners._bisect_numba.bisect_parts`; ``bisected``, a function of no arguments, may
    bring that try made beforehand by :func:`_bisection_try`), and, if the try of lowest cut left a part in pieces,
    that try with all its pieces merged into neighbours and rebalanced (on the gmsh vessel, hilbert's tries all
    kept a part in two halves too heavy to merge within ``_REPAIR_SLACK``). Merging only when every try was in
    pieces, a lower cut in pieces was passed over for a worse connected try: on the saved gmsh family, kdtree /
    hilbert / morton x seeds 0-5 (252 runs), merging the lowest cut changed 9 runs, hilbert's two above 1.15x METIS's
    cut (1.33, 1.31; ~10k 2D meshes) fell to 1.01 and 1.10, one morton run rose from 1.07 to 1.30 (the coarsest
    cut foretells the final one poorly), mean 0.9773 -> 0.9759.
    Returns ``(parts, cands)`` (``cands``: its boundary candidates ``(listed, cand, count)``, see
    :func:`~meshshard.partitioners._refine_numba.boundary_candidates`) of the lowest cut within ``bound`` plus one
    node weight (coarse nodes are too heavy to balance exactly; the finer levels rebalance), of the tries whose
    parts are connected if any are (measured on the gmsh family, seeds 0-2: a hilbert start on the ~10k vessel
    went from 1.18x METIS's cut to 0.95x, the mean from 1.019x to 1.013x); the first of equal tries."""
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
        consider(_coarsest_try(g, K.grow_parts(*g, a, num_parts, total / num_parts, salt + 101), num_parts, bound,
                               total, salt, _REPAIR_SLACK, limit))
        if bisect:
            consider(bisected() if bisected is not None else _bisection_try(g, num_parts, bound, total, salt))
        else:
            consider(_coarsest_try(g, K.grow_parts(*g, a if best is None else best[1], num_parts, total / num_parts,
                                                   salt + 202), num_parts, bound, total, salt, _REPAIR_SLACK, limit))
        if lowest is not None and lowest[0][1]:  # the lowest cut is in pieces: merge them all, then rebalance
            consider(_coarsest_try(g, lowest[1].copy(), num_parts, bound, total, salt, np.inf, limit))
    if best is None:  # no try within the limit: the finer levels rebalance the start's
        start = a.astype(_PART_DTYPE)
        return start, K.boundary_candidates(*g[:2], start)
    return best[1], best[2]


def _coarsest_try(g, start, num_parts, bound, total, salt, slack, limit):
    """One try of :func:`_coarsest` from the parts ``start`` (modified): pieces merged into neighbours up to
    ``slack`` x the mean part weight, rebalanced to ``bound``, FM passes -> ``(parts, cands, key)``; ``key``
    ``(in pieces, cut)`` orders the tries (a part in pieces here stays in pieces: FM moves nodes, not pieces, so
    connected parts come first), None when a part ends above ``limit``."""
    # the starts (grown, bisected: int64) take the finer levels' part type, so the kernels compile for one type
    start = start.astype(_PART_DTYPE, copy=False)
    K.repair_components(*g, start, num_parts, slack * total / num_parts)
    cands = K.boundary_candidates(*g[:2], start)
    K.rebalance(*g, start, num_parts, bound, salt, -1, *cands, *_NO_QUOTIENT)
    stall = max(_STALL // 2, (g[0].shape[0] - 1) // _COARSEST_STALL_DIV)
    cut = K.fm_refine(*g, start, num_parts, bound, _COARSEST_PASSES, stall, _MIN_GAIN, salt, *cands)
    if np.bincount(start, weights=g[3], minlength=num_parts).max() > limit:
        return start, cands, None
    return start, cands, (K.label_components(g[0], g[1], start)[1] > num_parts, cut)


def _bisection_try(g, num_parts, bound, total, salt):
    """The try of :func:`_coarsest` that starts from a recursive bisection of the coarsest graph ``g``: it does not
    depend on the start, so the hierarchy's thread makes it while the caller tries the others."""
    return _coarsest_try(g, bisect_parts(*g, num_parts, _BISECT_TRIES, salt), num_parts, bound, total, salt,
                         _REPAIR_SLACK, bound + float(g[3].max()))


def _refine_level(levels, level, a, listed, quotient, num_parts, max_w, coarse_w, salt):
    """Project ``a`` and its boundary candidates ``listed`` from level ``level + 1`` to ``level`` and refine it
    there (at most ``_PASSES`` FM passes on the finest level, ``_COARSE_LEVEL_PASSES`` on the others) ->
    ``(parts, listed, cut)``. ``quotient``: the parts' adjacency
    that guides rebalancing (see :func:`~meshshard.partitioners._refine_numba.quotient_graph`)."""
    cmap, g = levels[level]
    a = a[cmap].astype(_PART_DTYPE, copy=False)
    cands = K.project_candidates(cmap, listed)
    # the bound tightens level by level to max_w one level above the finest, so the finest level, the
    # largest, has little left to rebalance (measured: 0.9x the time of reaching max_w at the finest, same cuts)
    bound = max_w + (coarse_w - max_w) * max(level - 1, 0) / max(len(levels) - 1, 1)
    K.rebalance(*g, a, num_parts, bound, salt + level, _COARSE_ROUNDS if level else -1, *cands, *quotient)
    cut = K.fm_refine(*g, a, num_parts, bound, _COARSE_LEVEL_PASSES if level else _PASSES, _stall(a.shape[0]),
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
        a = K.majority_parts(_to_coarsest(levels, assign.shape[0]), assign, vw, g[0].shape[0] - 1, num_parts)
        if np.unique(a).shape[0] < num_parts:  # a part lost every cluster: this start cannot help
            return assign, np.inf
    bound, coarsest_salt = _coarsest_bound_and_salt(top, max_w, coarse_w, salt)
    a, (listed, cand, count) = _coarsest(g, a, num_parts, bound, total, coarsest_salt, grow=free, bisect=free,
                                         bisected=bisected)
    cut = K.cut_weight(indptr, indices, data, a) if top == 0 else np.inf
    # the parts' adjacency at the coarsest level guides rebalancing on every finer one (it costs a scan
    # of the boundary per level otherwise; moves seldom join new parts)
    quotient = K.quotient_graph(g[0], g[1], a, num_parts, cand, count[0])
    for level in range(top - 1, -1, -1):
        a, listed, cut = _refine_level(levels, level, a, listed, quotient, num_parts, max_w, coarse_w, salt)
    if np.bincount(a, weights=vw, minlength=num_parts).max() <= max_w and np.bincount(a, minlength=num_parts).min() > 0:
        return a, cut
    return assign, np.inf
