"""Compiled (numba) rating of one node's move: its edge weight to each neighbouring part and its best feasible target.

Shared by FM (:mod:`~meshshard.partitioners._kernels.fm`), rebalancing
(:mod:`~meshshard.partitioners._kernels.rebalance`) and the greedy sweeps
(:mod:`~meshshard.partitioners._kernels.greedy`), which also move a node with :func:`move_node`. The helpers are inlined into their callers
(``inline="always"``): a call between numba functions passes every array as a struct and counts its
references, which costs more than these short bodies.
"""
from __future__ import annotations

from meshshard.partitioners._kernels.jit import njit

__all__ = ["tally", "untally", "feasible_target", "scan_move", "best_move", "move_node"]


@njit(cache=True, inline="always")
def tally(u, indptr, indices, data, assign, conn, touched):
    """Edge weight from ``u`` to each neighbouring part into ``conn`` (entries at -1 = "not listed"),
    the parts listed in ``touched[:nt]``; returns ``nt``. The caller resets ``conn`` to -1 after."""
    nt = 0
    for e in range(indptr[u], indptr[u + 1]):
        p = assign[indices[e]]
        if conn[p] < 0.0:
            conn[p] = 0.0
            touched[nt] = p
            nt += 1
        conn[p] += data[e]
    return nt


@njit(cache=True, inline="always")
def untally(conn, touched, nt):
    """Reset the entries :func:`tally` listed in ``touched[:nt]`` to -1 ("not listed")."""
    for i in range(nt):
        conn[touched[i]] = -1.0


@njit(cache=True, inline="always")
def feasible_target(u, own, vw, part_w, max_w, conn, touched, nt):
    """Among the parts ``touched[:nt]`` tallied in ``conn``, the one other than ``own`` with the most edge
    weight to ``u`` that stays within ``max_w`` with ``u`` (ties: the lighter, then the lower id) -> ``(part or -1,
    weight)``."""
    best, best_c = -1, -1.0
    for i in range(nt):
        p = touched[i]
        if p == own or part_w[p] + vw[u] > max_w:
            continue
        c = conn[p]
        # ties: the lighter part, then the lower id, an order of the parts alone (fm_refine's rows list the parts in
        # part order, a tally in edge order); written out: an inlined helper for it slowed fm_refine down
        if c > best_c or (c == best_c and (part_w[p] < part_w[best] or (part_w[p] == part_w[best] and p < best))):
            best, best_c = p, c
    return best, best_c


@njit(cache=True, inline="always")
def scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched):
    """Best feasible move of ``u``, the weight of its cut edges and whether it is on the boundary, from one
    tally of its row -> ``(gain, target, cut weight, boundary)``; target -1 when there is no move (or ``u``
    is interior).

    The target is the neighbouring part with the most edge weight to ``u`` among those that stay
    within ``max_w`` with ``u``; ties go to the lighter part. ``conn`` (float64 ``[P]``, all -1:
    "not listed", so zero-weight edges still list their part once) and ``touched`` are scratch.
    """
    own = assign[u]
    nt = tally(u, indptr, indices, data, assign, conn, touched)
    out = 0.0
    for i in range(nt):
        if touched[i] != own:
            out += conn[touched[i]]
    best, best_c = feasible_target(u, own, vw, part_w, max_w, conn, touched, nt)
    gain = best_c - max(conn[own], 0.0)
    boundary = nt > 1 or (nt == 1 and touched[0] != own)
    untally(conn, touched, nt)
    return gain, best, out, boundary


@njit(cache=True, inline="always")
def best_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched):
    """:func:`scan_move`'s ``(gain, target)``."""
    gain, best, _, _ = scan_move(u, indptr, indices, data, assign, vw, part_w, max_w, conn, touched)
    return gain, best


@njit(cache=True, inline="always")
def move_node(u, src, t, assign, vw, part_w, sizes):
    """Move ``u`` from part ``src`` to part ``t``: its part, and both parts' weights ``part_w`` and node counts
    ``sizes``."""
    assign[u] = t
    part_w[src] -= vw[u]
    part_w[t] += vw[u]
    sizes[src] -= 1
    sizes[t] += 1
