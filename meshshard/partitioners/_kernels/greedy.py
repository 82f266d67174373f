"""Compiled (numba) greedy k-way refinement: sweeps of the boundary that take every move that does not cost cut.

METIS refines each level of its uncoarsening this way. Here a sweep precedes the Fiduccia-Mattheyses passes of a
level (:func:`~meshshard.partitioners._kernels.fm.fm_refine`): projected from a coarser level, the boundary runs
along the clusters' jagged edges, which moves of positive gain smooth out in one cheap scan of the boundary; FM,
whose every pass moves each node once, from a heap, with hill climbing and rollback, then starts from a smoother
boundary and needs fewer costly passes. Sequential, in the order of the candidate list: the same input gives the
same result.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.candidates import list_around
from meshshard.partitioners._kernels.csr import part_loads
from meshshard.partitioners._kernels.jit import njit
from meshshard.partitioners._kernels.moves import best_move, move_node

__all__ = ["greedy_refine"]


@njit(cache=True, nogil=True)
def greedy_refine(indptr, indices, data, vw, assign, num_parts, max_w, max_sweeps, listed, cand, count):
    """At most ``max_sweeps`` sweeps over the candidates ``cand[:count[0]]`` (see
    :func:`~meshshard.partitioners._kernels.candidates.boundary_candidates`), each node moved to its best feasible
    part (:func:`~meshshard.partitioners._kernels.moves.best_move`: within ``max_w``) when that lowers the cut, or
    keeps it and moves the node to a lighter part; a part never empties. Modifies ``assign``; the neighbours of
    moved nodes join the candidates (kept a superset of the boundary). Stops after a sweep without a move.

    Returns the cut weight removed.
    """
    part_w, sizes = part_loads(assign, vw, num_parts)
    conn = np.full(num_parts, -1.0)
    touched = np.empty(num_parts, dtype=np.int64)
    removed = 0.0
    nc = count[0]
    for _ in range(max_sweeps):
        moved = 0
        for i in range(nc):  # the nodes listed during this sweep wait for the next
            u = cand[i]
            src = assign[u]
            if sizes[src] <= 1:
                continue
            g, t = best_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
            # a move of zero gain only towards a lighter part: it cannot undo itself, so sweeps end
            if t < 0 or not (g > 0.0 or (g == 0.0 and part_w[t] + vw[u] < part_w[src])):
                continue
            move_node(u, src, t, assign, vw, part_w, sizes)
            moved += 1
            removed += g
            nc = list_around(u, indptr, indices, listed, cand, nc)
        if moved == 0:
            break
    count[0] = nc
    return removed
