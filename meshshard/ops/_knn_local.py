"""Single-rank neighbour search used by :mod:`meshshard.ops.knn` (no communication here).

Two interchangeable backends over one rank's points (local ids ``0..n-1``):

* ``"scipy"``: a :class:`scipy.spatial.cKDTree` (CPU), the default also for CUDA tensors: their
  points are copied to the host, searched and decided there, and the results moved back;
* ``"torch"``: chunked brute force on the tensors' device (``(q - p)^2`` summed, then top-k by a
  threshold), ``O(n q)`` work: it beats the tree only on small clouds, since its work grows with
  the product of query and point counts (``benchmarks/bench_gpu.py`` compares them).

Every distance that orders or admits a neighbour is :func:`pair_distance`'s: squares summed in dim
order, then a correctly rounded square root (:func:`exact_sqrt`), so both backends, the CPU and
CUDA give the same numbers bit for bit (checked on a GPU by ``tests/test_cuda.py``).

Both return neighbours ordered by ``(distance, id)``: among equal distances (duplicate points,
lattice ties) the lower id comes first, also at the k-th place. Since a rank's global ids are its
offset plus local id, that is the global ``(distance, global id)`` order the sharded kNN merges by.

Work counters (for the benchmark): ``slots`` counts kd-tree neighbour slots requested (``m`` per
query of a window of ``m`` nearest, retries included) or points returned by ball queries;
``pair_evals`` counts point-pair distances the torch backend computes.
"""
from __future__ import annotations

import itertools
from typing import Optional, Tuple

import numpy as np
import torch

__all__ = ["LocalIndex", "knn_window", "ball_pairs", "pair_distance", "exact_sqrt", "sum_squares"]

# Elements of one [chunk, n] distance block of the torch backend (a few tens of MiB in float64).
_CHUNK_ELEMS = 1 << 22


def exact_sqrt(ss: torch.Tensor) -> torch.Tensor:
    """Correctly rounded square root of a float64 tensor, on any device.

    torch's CPU kernel can be one ulp off (seen with torch 2.13: ``0x1.3e4cc37f3947cp-5`` where
    IEEE rounding, NumPy and cKDTree give ``...7bp-5``), which reordered equal-looking neighbours
    between the CPU, CUDA and scipy; NumPy's and CUDA's square roots are IEEE.
    """
    if ss.device.type == "cpu":
        return torch.from_numpy(np.sqrt(ss.detach().numpy()))
    return torch.sqrt(ss)


def sum_squares(diff):
    """``sum_i diff[..., i]^2`` added in dim order (torch or NumPy): a reduction may add in another
    order and round differently, and every distance here must round alike."""
    ss = diff[..., 0] * diff[..., 0]
    for i in range(1, diff.shape[-1]):
        ss = ss + diff[..., i] * diff[..., i]
    return ss


def pair_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Euclidean distance of matching rows, ``sqrt(sum_i (a_i - b_i)^2)`` summed in dim order.

    Every rank (and the single-process reference) uses this same formula, so the same pair always
    gets bit-identical distances and ties are decided the same way everywhere.
    """
    return exact_sqrt(sum_squares(a - b))


def _window_distance(queries: np.ndarray, data: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """:func:`pair_distance` of each query row and the points ``idx [q, m]`` (same operations, same
    rounding), one dim at a time: no ``[q, m, d]`` temporary, which for large windows would dwarf the result."""
    ss = None
    for j in range(queries.shape[1]):
        diff = queries[:, j:j + 1] - data[idx, j]
        sq = diff * diff
        ss = sq if ss is None else ss + sq
    return np.sqrt(ss)


# Relative width within which scipy's distance and pair_distance's may order two points differently.
_TIE_RTOL = 1e-12


def knn_window(tree, queries: np.ndarray, k: int, exclude: Optional[np.ndarray], workers: int) -> Tuple[np.ndarray, np.ndarray, int]:
    """First ``k`` points of ``tree`` by ``(distance, id)`` for every query (scipy backend).

    cKDTree orders equal distances arbitrarily, so a window of ``m > need`` nearest is fetched and
    is complete when its last distance is strictly larger than the ``need``-th (or it holds every
    point); otherwise the window doubles for those queries only.

    Args:
        tree: cKDTree over ``n`` points.
        queries: float64 ``[q, d]``.
        k: neighbours wanted.
        exclude: optional int ``[q]``: a point id left out for each query (the query itself).
        workers: cKDTree threads.

    Returns:
        ``(dist [q, k] float64, idx [q, k] int64, slots)``; rows padded with ``inf`` / ``-1`` when
        fewer than ``k`` points qualify.
    """
    n, q = int(tree.n), int(queries.shape[0])
    out_d = np.full((q, k), np.inf)
    out_i = np.full((q, k), -1, dtype=np.int64)
    if n == 0 or q == 0:
        return out_d, out_i, 0
    need = k + (1 if exclude is not None else 0)
    m = min(n, need + 1)
    todo = np.arange(q)
    slots = 0
    while todo.size:
        d, i = tree.query(queries[todo], k=m, workers=workers)
        d = np.asarray(d, dtype=np.float64).reshape(len(todo), m)
        i = np.asarray(i, dtype=np.int64).reshape(len(todo), m)
        slots += len(todo) * m
        if m == n:
            done = np.ones(len(todo), dtype=bool)
        else:  # a gap wider than the rounding between scipy's distances and pair_distance's
            done = d[:, m - 1] > d[:, need - 1] * (1 + _TIE_RTOL) + 1e-300
        rows = todo[done]
        d, i = d[done], i[done]
        # scipy's distances may differ from pair_distance's in the last bit: order by the latter,
        # as the torch backend and every rank's merge do. cKDTree's order is already right except
        # where neighbours lie within rounding of each other.
        tied = (d[:, 1:] <= d[:, :-1] * (1 + _TIE_RTOL) + 1e-300).any(axis=1)
        d = _window_distance(queries[rows], tree.data, i)
        if tied.any():
            order = np.lexsort((i[tied], d[tied]), axis=1)
            d[tied] = np.take_along_axis(d[tied], order, axis=1)
            i[tied] = np.take_along_axis(i[tied], order, axis=1)
        if exclude is not None:
            bad = i == exclude[rows][:, None]
            d[bad], i[bad] = np.inf, -1
            back = np.argsort(bad, axis=1, kind="stable")  # move the excluded entry to the end
            d = np.take_along_axis(d, back, axis=1)
            i = np.take_along_axis(i, back, axis=1)
        c = min(k, m)
        out_d[rows, :c] = d[:, :c]
        out_i[rows, :c] = i[:, :c]
        todo = todo[~done]
        m = min(n, 2 * m)
    return out_d, out_i, slots


def ball_pairs(points: torch.Tensor, queries: torch.Tensor, r: float, tree=None, exclude: Optional[torch.Tensor] = None,
               max_num: Optional[int] = None, workers: int = 1) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """All ``(query, point)`` pairs with distance ``<= r``, sorted by ``(query, distance, id)``.

    Candidates come from ``tree.query_ball_point`` with a slightly larger radius (or, without a
    tree, from brute force); the ``<= r`` decision is then made with :func:`pair_distance`, so it is
    identical on every rank.

    Returns:
        ``(qpos [m], idx [m], dist [m], work)``; with ``max_num``, at most that many per query (the
        nearest by ``(distance, id)``).
    """
    dev = points.device
    n, q = points.shape[0], queries.shape[0]
    empty = torch.zeros(0, dtype=torch.long, device=dev)
    if n == 0 or q == 0:
        return empty, empty, torch.zeros(0, dtype=torch.float64, device=dev), 0
    if tree is not None:
        lists = tree.query_ball_point(queries.cpu().numpy(), r * (1 + 1e-9) + 1e-300, workers=workers, return_sorted=False)
        lens = np.fromiter(map(len, lists), dtype=np.int64, count=q)
        flat = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(lens.sum()))
        qpos = torch.repeat_interleave(torch.arange(q), torch.from_numpy(lens)).to(dev)
        idx = torch.from_numpy(flat).to(dev)
        work = int(lens.sum())
    else:
        qs, ps, work = [], [], 0
        rows_per = max(1, _CHUNK_ELEMS // n)
        for s in range(0, q, rows_per):
            qc = queries[s:s + rows_per]
            diff = qc[:, None, :] - points[None, :, :]
            ss = (diff * diff).sum(-1)
            a, b = (ss <= (r * (1 + 1e-9)) ** 2 + 1e-300).nonzero(as_tuple=True)
            qs.append(a + s)
            ps.append(b)
            work += qc.shape[0] * n
        qpos, idx = torch.cat(qs), torch.cat(ps)
    dist = pair_distance(queries[qpos], points[idx])
    keep = dist <= r
    if exclude is not None:
        keep &= idx != exclude[qpos]
    qpos, idx, dist = qpos[keep], idx[keep], dist[keep]
    qpos, idx, dist = sort_by_query(qpos, idx, dist)
    if max_num is not None:
        keep = rank_in_group(qpos, q) < max_num
        qpos, idx, dist = qpos[keep], idx[keep], dist[keep]
    return qpos, idx, dist, work


def sort_by_query(qpos: torch.Tensor, ids: torch.Tensor, dist: torch.Tensor):
    """Reorder triples by ``(qpos, dist, ids)`` (three stable sorts, last key first)."""
    o = torch.argsort(ids, stable=True)
    qpos, ids, dist = qpos[o], ids[o], dist[o]
    o = torch.argsort(dist, stable=True)
    qpos, ids, dist = qpos[o], ids[o], dist[o]
    o = torch.argsort(qpos, stable=True)
    return qpos[o], ids[o], dist[o]


def rank_in_group(qpos_sorted: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Position of every entry inside its run of equal ``qpos`` (``qpos`` sorted)."""
    counts = torch.bincount(qpos_sorted, minlength=num_groups)
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(qpos_sorted.numel(), device=qpos_sorted.device) - starts[qpos_sorted]


class LocalIndex:
    """Neighbour search over one rank's points.

    Args:
        points: float64 ``[n, d]``.
        backend: ``"scipy"`` (cKDTree, CPU) or ``"torch"`` (chunked brute force on ``points``'s device).
        workers: cKDTree threads (scipy backend).
    """

    def __init__(self, points: torch.Tensor, backend: str, workers: int = 1):
        self.points = points
        self.backend = backend
        self.workers = workers
        self.slots = 0
        self.pair_evals = 0
        self.tree = None
        if backend == "scipy":
            from scipy.spatial import cKDTree

            self._cpu = points.detach().cpu()  # the tree's decisions are made on the host
            self._np = self._cpu.numpy()
            self.tree = cKDTree(self._np)

    @property
    def n(self) -> int:
        """Number of indexed points."""
        return int(self.points.shape[0])

    def knn(self, queries: torch.Tensor, k: int, exclude: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """First ``k`` local points by ``(distance, id)`` per query.

        Returns:
            ``(dist [q, k] float64, idx [q, k] int64)`` on ``queries``'s device, padded with
            ``inf`` / ``-1`` when fewer than ``k`` points qualify.
        """
        if self.backend == "scipy":
            ex = exclude.cpu().numpy() if exclude is not None else None
            d, i, slots = knn_window(self.tree, queries.cpu().numpy(), k, ex, self.workers)
            self.slots += slots
            return torch.from_numpy(d).to(queries.device), torch.from_numpy(i).to(queries.device)
        return self._torch_knn(queries, k, exclude)

    def _torch_knn(self, queries, k, exclude):
        P, n, q, dev = self.points, self.n, queries.shape[0], queries.device
        out_d = torch.full((q, k), float("inf"), dtype=torch.float64, device=dev)
        out_i = torch.full((q, k), -1, dtype=torch.long, device=dev)
        if n == 0 or q == 0:
            return out_d, out_i
        kk = min(k, n)
        rows_per = max(1, _CHUNK_ELEMS // n)
        for s in range(0, q, rows_per):
            qc = queries[s:s + rows_per]
            c = qc.shape[0]
            D = exact_sqrt(sum_squares(qc[:, None, :] - P[None, :, :]))  # pair_distance's formula
            self.pair_evals += c * n
            if exclude is not None:
                D[torch.arange(c, device=dev), exclude[s:s + c]] = float("inf")
            thr = D.topk(kk, dim=1, largest=False).values[:, kk - 1:kk]
            finite = torch.isfinite(D)
            lt = (D < thr) & finite
            eq = (D == thr) & finite
            need_eq = kk - lt.sum(1, keepdim=True)
            sel = lt | (eq & (torch.cumsum(eq.long(), 1) <= need_eq))  # lowest ids win the tie
            r, col = sel.nonzero(as_tuple=True)  # row-major: ids increasing inside a row
            r, col, dv = sort_by_query(r, col, D[r, col])
            pos = rank_in_group(r, c)
            out_d[s + r, pos] = dv
            out_i[s + r, pos] = col
        return out_d, out_i

    def ball(self, queries: torch.Tensor, r: float, exclude: Optional[torch.Tensor] = None, max_num: Optional[int] = None):
        """Pairs within ``r`` (see :func:`ball_pairs`): ``(qpos, idx, dist)`` sorted by query."""
        if self.tree is not None:  # decided on the host, whatever the queries' device
            qpos, idx, dist, work = ball_pairs(self._cpu, queries.detach().cpu(), r, tree=self.tree,
                                               exclude=None if exclude is None else exclude.cpu(), max_num=max_num,
                                               workers=self.workers)
            qpos, idx, dist = (t.to(queries.device) for t in (qpos, idx, dist))
        else:
            qpos, idx, dist, work = ball_pairs(self.points, queries, r, tree=self.tree, exclude=exclude,
                                               max_num=max_num, workers=self.workers)
        if self.tree is not None:
            self.slots += work
        else:
            self.pair_evals += work
        return qpos, idx, dist
