r"""Sharded k-nearest-neighbour and radius graphs of a point cloud split across ranks.

Each rank holds only its own points ``[n_r, d]`` (uneven, possibly empty). Global ids are in
"ShardTensor order": rank ``r``'s local row ``i`` is ``offsets[r] + i`` with
``offsets = [0, cumsum(n)]``. Every rank returns the edges whose *query* (target) is one of its
own points, in PyG's ``source_to_target`` flow (row 0 neighbour, row 1 query), grouped by query in
increasing id, neighbours nearest first.

The result is exact: it equals :func:`knn_reference` (cKDTree on the whole cloud) with ties broken
by ``(distance, global id)`` (duplicate points included).

Algorithm (query shipping; only queries that can matter move, never the point cloud):

1. Every rank finds the ``k`` best *local* neighbours of its points; the ``k``-th local distance
   ``R_q`` bounds the true ``k``-th distance (``inf`` when the rank has fewer than ``k`` points).
2. Ranks all-gather a few bounding boxes each (a coarse k-d split of their points).
3. A query goes to rank ``j`` only if its ball of radius ``R_q`` touches one of ``j``'s boxes
   (``<=``, so boundary ties are kept). Rank ``j`` answers with its own ``k`` best candidates
   at distance ``<= R_q``.
4. The candidates are merged by ``(distance, global id)``, keeping ``k``.

A true neighbour ``p`` of ``q`` on rank ``j`` has ``d(p, q) <= R_q`` (else the ``k`` local ones
beat it), so ``q`` is sent to ``j``, and ``p`` is among ``j``'s ``k`` best for ``q``: nothing is
missed. Communication: one tiny all-gather (sizes, validation), one of the boxes, and three
``all_to_all_single`` calls (counts, queries, answers).

Points may also come as a ShardTensor (``Shard(0)``): its local shard are the owned points and its
mesh gives the group. :func:`knn_search` / :func:`radius_search` run the same exchange between two
different sharded sets (queries travel to the points' boxes) and return per-query rows laid out
like the queries. They are plain functions, not ShardTensor handlers: torch has no kNN op to hook.
"""
from __future__ import annotations

import numbers
from typing import Dict, List, NamedTuple, Optional

import numpy as np
import torch

from meshshard import distributed as msd
from meshshard.ops._knn_local import LocalIndex, exact_sqrt, rank_in_group, sort_by_query, sum_squares
from meshshard.tensor import ShardTensor
from meshshard.tensor.spec import shard_dim_of

__all__ = [
    "sharded_knn",
    "sharded_radius_graph",
    "edge_vectors",
    "knn_search",
    "radius_search",
    "knn_reference",
    "radius_reference",
]

_REL_TOL = 1e-9  # box tests are widened by this (relative) so rounding never drops a candidate


# --------------------------------------------------------------------------- references
def knn_reference(points, k: int, loop: bool = True) -> torch.Tensor:
    r"""Single-process exact kNN graph with the tie rule of :func:`sharded_knn` (for tests, benchmarks).

    Neighbours of a point are the first ``k`` of all points (itself left out when ``loop=False``)
    ordered by ``(cKDTree distance, id)``.

    Args:
        points: ``[N, d]`` tensor or array, finite.
        k: neighbours per point, ``1 <= k <= N`` (``N - 1`` with ``loop=False``).
        loop: count a point as its own neighbour (as cKDTree does).

    Returns:
        ``LongTensor [2, N * k]``: row 0 neighbour, row 1 query; grouped by query, nearest first.
    """
    from scipy.spatial import cKDTree

    from meshshard.ops._knn_local import knn_window

    pts = _as_float64(points).cpu().numpy()
    n = pts.shape[0]
    _check_k(k, n, loop)
    exclude = None if loop else np.arange(n)
    _, idx, _ = knn_window(cKDTree(pts), pts, int(k), exclude, -1)
    query = np.repeat(np.arange(n, dtype=np.int64), k)
    return torch.from_numpy(np.stack([idx.reshape(-1), query]))


def radius_reference(points, r: float, loop: bool = True, max_num_neighbors: Optional[int] = None) -> torch.Tensor:
    r"""Single-process radius graph with the rules of :func:`sharded_radius_graph`.

    Edges join every pair at distance ``<= r`` (like ``cKDTree.query_ball_point``); with
    ``max_num_neighbors`` only the nearest ones by ``(distance, id)`` are kept per query.

    Args:
        points: ``[N, d]`` tensor or array, finite.
        r: radius ``>= 0``.
        loop: include ``(i, i)`` self edges.
        max_num_neighbors: ``None`` (all) or the most neighbours kept per query.

    Returns:
        ``LongTensor [2, E]`` grouped by query, nearest first.
    """
    from scipy.spatial import cKDTree

    from meshshard.ops._knn_local import ball_pairs

    pts = _as_float64(points).cpu()
    _check_radius(r, max_num_neighbors)
    n = pts.shape[0]
    tree = cKDTree(pts.numpy()) if n else None
    exclude = None if loop else torch.arange(n)
    qpos, idx, _, _ = ball_pairs(pts, pts, float(r), tree=tree, exclude=exclude, max_num=max_num_neighbors, workers=-1)
    return torch.stack([idx, qpos])


# --------------------------------------------------------------------------- validation
def _as_float64(points) -> torch.Tensor:
    if not isinstance(points, torch.Tensor):
        points = torch.as_tensor(np.asarray(points))
    if points.dim() != 2 or points.shape[1] < 1:
        raise ValueError(f"points must have shape [N, d], got {tuple(points.shape)}")
    if points.is_complex() or points.dtype == torch.bool:
        raise TypeError(f"points must be real numbers, got dtype {points.dtype}")
    pts = points.detach().to(torch.float64)
    if not bool(torch.isfinite(pts).all()):
        raise ValueError("points must be finite (found NaN or inf)")
    return pts


def _check_k(k, n: int, loop: bool) -> None:
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    kmax = n if loop else n - 1
    if k < 1 or k > kmax:
        raise ValueError(f"k must be in [1, {kmax}] for {n} points with loop={loop}, got {k}")


def _check_radius(r, max_num, max_name: str = "max_num_neighbors") -> None:
    if isinstance(r, bool) or not isinstance(r, numbers.Real) or not np.isfinite(float(r)) or float(r) < 0:
        raise ValueError(f"r must be a finite number >= 0, got {r!r}")
    if max_num is not None and (isinstance(max_num, bool) or not isinstance(max_num, numbers.Integral) or max_num < 1):
        raise ValueError(f"{max_name} must be None or an int >= 1, got {max_num!r}")


def _prepare(points_owned, what: str, params: List[int], names: List[str], group):
    """Validate on every rank, then agree on sizes, point dim and the parameters.

    Returns:
        ``(pts float64 [n, d], sizes list, offsets LongTensor [W+1], rank, world)``.
    """
    err, pts = None, None
    try:
        pts = _as_float64(points_owned)
    except (ValueError, TypeError) as exc:
        err = exc
    msd.raise_together(err, what, group)
    msd.check_same_across_ranks([pts.shape[1]] + params, what, ["point dim"] + names, group)
    sizes = msd.all_gather_sizes([pts.shape[0]], group).view(-1).tolist()
    offsets = torch.zeros(len(sizes) + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(sizes, dtype=torch.long), 0)
    return pts, sizes, offsets, msd.get_rank(group), msd.get_world_size(group)


def _backend(points: torch.Tensor, backend: Optional[str]) -> str:
    if backend is None:  # the tree also for CUDA points: brute force wins only on small clouds (_knn_local's doc)
        return "scipy"
    if backend not in ("scipy", "torch"):
        raise ValueError(f"backend must be None, 'scipy' or 'torch', got {backend!r}")
    return backend


class _Layout(NamedTuple):
    """Where a ShardTensor of points lives: its mesh, placements and the mesh dim that shards it."""

    mesh: object
    placements: tuple
    mesh_dim: int


def _unwrap(points, group, what: str):
    """``(local rows, group, layout)``: a ShardTensor gives its (differentiable) local shard, the
    group of its sharding mesh dim and its layout; anything else is returned as is with ``group``
    and ``None``. Raises (on every rank alike: meshes and placements are the same everywhere)
    unless the ShardTensor is ``Shard(0)`` on one mesh dim and Replicate on the others."""
    if not isinstance(points, msd.DTensor):
        return points, group, None
    if not isinstance(points, ShardTensor):
        raise TypeError(f"{what}: expected a torch.Tensor or a ShardTensor, got a plain DTensor")
    if group is not None:
        raise ValueError(f"{what}: a ShardTensor brings its process group (its device mesh); pass group= only "
                         f"with plain tensors")
    sd = shard_dim_of(points.placements)
    others_replicate = all(isinstance(p, msd.Replicate) for i, p in enumerate(points.placements)
                           if sd is None or i != sd[0])
    if sd is None or sd[1] != 0 or not others_replicate:
        raise ValueError(f"{what}: a ShardTensor of points must be Shard(0) on one mesh dim and Replicate on the "
                         f"others, got placements {tuple(points.placements)}")
    layout = _Layout(points.device_mesh, tuple(points.placements), sd[0])
    return points.to_local(), points.device_mesh.get_group(sd[0]), layout


def _wrap(local: torch.Tensor, layout: Optional[_Layout], sizes: Optional[List[int]]):
    """``local`` as a ShardTensor with ``layout`` (rows ``sizes`` per rank; ``None``: gathered), or
    itself when ``layout`` is ``None`` (plain-tensor inputs give plain outputs)."""
    if layout is None:
        return local
    return ShardTensor.from_local(local, layout.mesh, layout.placements, "infer" if sizes is None else list(sizes))


# --------------------------------------------------------------------------- boxes
def _split_boxes(pts: torch.Tensor, num_boxes: int) -> torch.Tensor:
    """Bounding boxes ``[B, 2, d]`` (lo, hi) of a coarse k-d split of ``pts`` into ``B = 2^L``
    leaves (median cuts along the widest axis); empty leaves are ``lo = +inf, hi = -inf``."""
    d = pts.shape[1]
    levels = max(0, int(np.ceil(np.log2(max(1, num_boxes)))))
    leaves = [pts]
    for _ in range(levels):
        nxt = []
        for leaf in leaves:
            if leaf.shape[0] < 2:
                nxt += [leaf, leaf[:0]]
                continue
            axis = int(torch.argmax(leaf.max(0).values - leaf.min(0).values))
            o = torch.argsort(leaf[:, axis])
            h = leaf.shape[0] // 2
            nxt += [leaf[o[:h]], leaf[o[h:]]]
        leaves = nxt
    boxes = torch.empty(len(leaves), 2, d, dtype=torch.float64, device=pts.device)
    for b, leaf in enumerate(leaves):
        if leaf.shape[0]:
            boxes[b, 0], boxes[b, 1] = leaf.min(0).values, leaf.max(0).values
        else:
            boxes[b, 0], boxes[b, 1] = float("inf"), float("-inf")
    return boxes


def _box_distance(q: torch.Tensor, boxes: torch.Tensor, world: int) -> torch.Tensor:
    """Distance ``[n, W]`` from every query to the nearest box of every rank (``inf``: no boxes)."""
    n, d = q.shape
    flat = boxes.reshape(-1, 2, d)
    nb = flat.shape[0] // world
    out = torch.empty(n, world, dtype=torch.float64, device=q.device)
    rows = max(1, (1 << 22) // max(1, flat.shape[0] * d))
    for s in range(0, n, rows):
        qc = q[s:s + rows, None, :]
        gap = torch.clamp(torch.maximum(flat[None, :, 0] - qc, qc - flat[None, :, 1]), min=0)
        # rounded like pair_distance, so it never exceeds the distance of a point inside the box; inf for empty boxes
        dist = exact_sqrt(sum_squares(gap))
        out[s:s + rows] = dist.view(-1, world, nb).min(-1).values
    return out


# --------------------------------------------------------------------------- the exchange
def _ask_remote(pts, radius, index: LocalIndex, rank, world, offsets, group, num_boxes, answer, stats):
    """Send each query ``pts`` to the ranks whose boxes (of their indexed points) its ball touches;
    collect their answers.

    ``answer(queries [m, d], radius [m]) -> (qpos, local ids, dist)`` runs on the receiving rank.

    Returns:
        ``(qid, gid, dist)`` of the remote candidates, ``qid`` a local query row.
    """
    n, d = pts.shape
    dev = pts.device
    boxes = msd.all_gather_into_tensor(_split_boxes(index.points, num_boxes), group)  # [W, B, 2, d]
    if n:
        bd = _box_distance(pts, boxes, world)
        ship = (bd <= radius[:, None] * (1 + _REL_TOL)) & torch.isfinite(bd)
        ship[:, rank] = False
    else:
        ship = torch.zeros(0, world, dtype=torch.bool, device=dev)
    stats["box_tests"] = n * boxes.shape[0] * boxes.shape[1]
    dest, qrow = ship.t().nonzero(as_tuple=True)  # grouped by destination rank, rows increasing
    send_counts = torch.bincount(dest, minlength=world).cpu()
    cdev = msd.comm_device(group)
    recv_counts = msd.all_to_all_single(send_counts.to(cdev), [1] * world, [1] * world, group).cpu()
    payload = torch.cat([pts[qrow], radius[qrow, None]], 1)
    got = msd.all_to_all_single(payload, recv_counts.tolist(), send_counts.tolist(), group)
    stats["queries_sent"] = int(qrow.numel())
    stats["queries_received"] = int(got.shape[0])

    # Answer the received queries with local candidates; send back per-query counts, then rows.
    m = got.shape[0]
    qpos, lid, dist = answer(got[:, :d].contiguous(), got[:, d].contiguous())
    per_query = torch.bincount(qpos, minlength=m) if m else torch.zeros(0, dtype=torch.long, device=dev)
    back_counts = msd.all_to_all_single(per_query, send_counts.tolist(), recv_counts.tolist(), group)
    reply = torch.stack([dist, (lid + offsets[rank]).to(torch.float64)], 1)  # gids < 2^53: exact
    src_rank_of_query = torch.repeat_interleave(torch.arange(world, device=dev), recv_counts.to(dev))
    reply_split = torch.bincount(src_rank_of_query[qpos], minlength=world).cpu() if m else torch.zeros(world, dtype=torch.long)
    back_rows = torch.zeros(world, dtype=torch.long)
    if qrow.numel():
        back_rows = torch.bincount(dest.cpu(), weights=back_counts.cpu().double(), minlength=world).round().long()
    cand = msd.all_to_all_single(reply, back_rows.tolist(), reply_split.tolist(), group)
    stats["candidates_sent"] = int(reply.shape[0])
    stats["candidates_received"] = int(cand.shape[0])
    stats["bytes_sent"] = int(payload.numel() * 8 + reply.numel() * 8 + (per_query.numel() + 2 * world) * 8)
    qid = torch.repeat_interleave(qrow, back_counts.to(dev))
    return qid, cand[:, 1].round().long(), cand[:, 0]


def _merge(n, local, remote, keep: Optional[int]):
    """Merge ``(qid, gid, dist)`` triples by ``(qid, dist, gid)``; keep the first ``keep`` per query."""
    qid = torch.cat([local[0], remote[0]])
    gid = torch.cat([local[1], remote[1]])
    dist = torch.cat([local[2], remote[2]])
    qid, gid, dist = sort_by_query(qid, gid, dist)
    if keep is not None:
        sel = rank_in_group(qid, n) < keep
        qid, gid, dist = qid[sel], gid[sel], dist[sel]
    return qid, gid, dist


def _finish(points_owned, edge_index, sizes, group, return_graph, return_edge_vec, return_stats, stats, index,
            layout: Optional[_Layout], edge_sizes: Optional[List[int]]):
    stats["pair_evals"] = index.pair_evals
    stats["tree_slots"] = index.slots
    stats["edges"] = int(edge_index.shape[1])
    extras = []
    if return_graph:
        from meshshard.graph import ShardedGraph

        extras.append(ShardedGraph.from_global_edges(edge_index.cpu(), sizes, group=group))
    if return_edge_vec:
        extras.append(_wrap(edge_vectors(points_owned, edge_index, group=group, sizes=sizes), layout, edge_sizes))
    if return_stats:
        extras.append(stats)
    return (edge_index, *extras) if extras else edge_index


def _knn_answer(index: LocalIndex, k: int):
    """``answer`` for :func:`_ask_remote`: this rank's ``k`` best points within each query's radius."""

    def answer(queries, rq):
        d_, i_ = index.knn(queries, k)
        ok = (i_ >= 0) & (d_ <= rq[:, None])
        qpos = torch.arange(queries.shape[0], device=queries.device)[:, None].expand_as(i_)
        return qpos[ok], i_[ok], d_[ok]  # row-major: grouped by query

    return answer


# --------------------------------------------------------------------------- public
def sharded_knn(
    points_owned: torch.Tensor,
    k: int,
    loop: bool = True,
    group=None,
    return_graph: bool = False,
    return_edge_vec: bool = False,
    return_stats: bool = False,
    backend: Optional[str] = None,
    num_boxes: int = 16,
    workers: int = 1,
):
    r"""Exact k-nearest-neighbour graph of a point cloud whose points are split across ranks (collective).

    Args:
        points_owned: ``[n_r, d]`` this rank's points (uneven across ranks, ``n_r = 0`` allowed),
            finite; same ``d`` on every rank. Or a ShardTensor ``[N, d]`` (``Shard(0)`` on one
            mesh dim, Replicate on any others): its local shard are the owned points and its
            sharding mesh dim's group is the group.
        k: neighbours per point, same on every rank; ``1 <= k <= N`` (``N - 1`` with
            ``loop=False``), ``N`` the total number of points.
        loop: if True a point counts as its own nearest neighbour (as cKDTree does); if False
            (PyG's ``knn_graph`` default) it is left out and ``k`` other points are returned.
        group: process group for a plain tensor (``None``: default group, or a single process);
            must be ``None`` for a ShardTensor.
        return_graph: also return a :class:`meshshard.graph.ShardedGraph` of the edges.
        return_edge_vec: also return ``pos[src] - pos[dst]`` per edge ``[E_r, d]`` in the dtype of
            ``points_owned``, differentiable w.r.t. ``points_owned`` on every rank
            (see :func:`edge_vectors`); for a ShardTensor input a ShardTensor ``[E, d]``
            (``Shard(0)``, this rank's ``E_r`` edges as its shard, in the order of ``edge_index``
            and of the graph's ``edge_index``), ready as ``edge_attr``.
        return_stats: also return a dict of this rank's work and traffic (``queries_sent``,
            ``candidates_received``, ``tree_slots`` = kd-tree neighbour slots requested, ``pair_evals``
            = brute-force distances, ``bytes_sent``, ...).
        backend: ``"scipy"`` (cKDTree on the host, the default, also for CUDA points; results on
            the points' device) or ``"torch"`` (chunked brute force on the points' device: faster
            only for small clouds, see :mod:`meshshard.ops._knn_local`).
        num_boxes: bounding boxes per rank used to decide where a query must go.
        workers: cKDTree threads per rank.

    Returns:
        ``edge_index`` ``LongTensor [2, n_r * k]`` in global ids (row 0 neighbour, row 1 query,
        queries all owned by this rank, grouped by query in increasing id, nearest first), a plain
        tensor for a ShardTensor input too (global ids are ``full_tensor`` row numbers: rank
        ``r``'s local row ``i`` is ``pos.offsets() + i``); followed, in this order, by the graph,
        the edge vectors and the stats dict when requested.

    Example::

        ei = sharded_knn(pos_owned, k=16)           # [2, n_r * 16], global ids
        ei, g = sharded_knn(pos_owned, k=16, return_graph=True)
        x_ext = g.exchange(x_owned)                 # owned + ghost rows for message passing
        _, g, vec = sharded_knn(pos, 16, return_graph=True, return_edge_vec=True)  # pos: ShardTensor
        out = ShardedConv(EdgeConv(mlp))(x, g)      # or DomainParallel(model)(x, g)
    """
    points_owned, group, layout = _unwrap(points_owned, group, "sharded_knn")
    err = None
    try:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an int, got {type(k).__name__}")
        be = _backend(points_owned if isinstance(points_owned, torch.Tensor) else torch.empty(0), backend)
    except (TypeError, ValueError) as exc:
        err = exc
    msd.raise_together(err, "sharded_knn", group)
    pts, sizes, offsets, rank, world = _prepare(points_owned, "sharded_knn", [int(k), int(bool(loop))], ["k", "loop"], group)
    total = int(sum(sizes))
    _check_k(int(k), total, bool(loop))  # every rank knows total, so every rank raises alike
    k = int(k)
    n, dev = pts.shape[0], pts.device
    index = LocalIndex(pts, be, workers)
    stats: Dict[str, int] = {"points": n}

    exclude = None if loop else torch.arange(n, device=dev)
    ld, li = index.knn(pts, k, exclude)
    radius = ld[:, k - 1] if n else torch.zeros(0, dtype=torch.float64, device=dev)

    remote = _ask_remote(pts, radius, index, rank, world, offsets, group, num_boxes, _knn_answer(index, k), stats)
    # Only queries that got remote candidates need a merge; the others keep their local k (which
    # are complete: N >= k, so a query without remote candidates has k local neighbours).
    gids = li + offsets[rank]
    touched = torch.unique(remote[0])
    if touched.numel():
        sub_l, sub_d = gids[touched], ld[touched]
        ok = sub_l >= offsets[rank]
        qloc = torch.arange(touched.numel(), device=dev)[:, None].expand_as(sub_l)
        rq = torch.searchsorted(touched, remote[0])
        qid, gid, _ = _merge(touched.numel(), (qloc[ok], sub_l[ok], sub_d[ok]), (rq, remote[1], remote[2]), k)
        gids[touched] = gid.view(-1, k)
    edge_index = torch.stack([gids.reshape(-1), torch.arange(n, device=dev).repeat_interleave(k) + offsets[rank]])
    edge_index = edge_index.to(points_owned.device)
    return _finish(points_owned, edge_index, sizes, group, return_graph, return_edge_vec, return_stats, stats, index,
                   layout, [s * k for s in sizes])


def sharded_radius_graph(
    points_owned: torch.Tensor,
    r: float,
    loop: bool = True,
    max_num_neighbors: Optional[int] = None,
    group=None,
    return_graph: bool = False,
    return_edge_vec: bool = False,
    return_stats: bool = False,
    backend: Optional[str] = None,
    num_boxes: int = 16,
    workers: int = 1,
):
    r"""Exact radius graph of a point cloud whose points are split across ranks (collective).

    Every pair at distance ``<= r`` is an edge (as ``cKDTree.query_ball_point``). Unlike PyG's
    ``radius_graph`` (which keeps an arbitrary ``max_num_neighbors=32``), the default keeps all of
    them, and a limit keeps the nearest by ``(distance, global id)``, so the result is deterministic.

    Args:
        points_owned: ``[n_r, d]`` this rank's points (``n_r = 0`` allowed); same ``d`` everywhere;
            or a ShardTensor, as in :func:`sharded_knn`.
        r: radius ``>= 0``, same on every rank.
        loop: include ``(i, i)`` self edges.
        max_num_neighbors: ``None`` (all) or the most neighbours kept per query.
        group, return_graph, return_edge_vec, return_stats, backend, num_boxes, workers: as in
            :func:`sharded_knn`.

    Returns:
        ``edge_index`` ``LongTensor [2, E_r]`` in global ids (row 0 neighbour, row 1 query owned by
        this rank), grouped by query, nearest first; then the requested extras as in
        :func:`sharded_knn`.
    """
    points_owned, group, layout = _unwrap(points_owned, group, "sharded_radius_graph")
    err = None
    try:
        _check_radius(r, max_num_neighbors)
        be = _backend(points_owned if isinstance(points_owned, torch.Tensor) else torch.empty(0), backend)
    except (TypeError, ValueError) as exc:
        err = exc
    msd.raise_together(err, "sharded_radius_graph", group)
    r = float(r)
    rbits = int(np.array(r, dtype=np.float64).view(np.int64))
    mnn = -1 if max_num_neighbors is None else int(max_num_neighbors)
    pts, sizes, offsets, rank, world = _prepare(points_owned, "sharded_radius_graph", [rbits, int(bool(loop)), mnn],
                                                ["r (bits)", "loop", "max_num_neighbors"], group)
    n, dev = pts.shape[0], pts.device
    index = LocalIndex(pts, be, workers)
    stats: Dict[str, int] = {"points": n}
    exclude = None if loop else torch.arange(n, device=dev)
    lq, li, ldist = index.ball(pts, r, exclude=exclude, max_num=max_num_neighbors)
    radius = torch.full((n,), r, dtype=torch.float64, device=dev)

    def answer(queries, rq):
        return index.ball(queries, r, max_num=max_num_neighbors)

    remote = _ask_remote(pts, radius, index, rank, world, offsets, group, num_boxes, answer, stats)
    qid, gid, _ = _merge(n, (lq, li + offsets[rank], ldist), remote, max_num_neighbors)
    edge_index = torch.stack([gid, qid + offsets[rank]]).to(points_owned.device)
    return _finish(points_owned, edge_index, sizes, group, return_graph, return_edge_vec, return_stats, stats, index,
                   layout, None)


def edge_vectors(points_owned, edge_index: torch.Tensor, group=None, sizes: Optional[List[int]] = None):
    r"""``pos[src] - pos[dst]`` for this rank's edges, differentiable w.r.t. the points everywhere (collective).

    Remote source points are fetched once each with
    :func:`meshshard.distributed.autograd.indexed_all_to_all_v`, whose backward returns their
    gradients to the owners (summed over repeats), so ``loss.backward()`` gives every rank the
    gradient of the sum of all ranks' losses w.r.t. its own points.

    Args:
        points_owned: float ``[n_r, d]`` this rank's points, or a ShardTensor ``[N, d]``
            (``Shard(0)``; its mesh gives the group).
        edge_index: ``LongTensor [2, E_r]`` global ids, targets (row 1) owned by this rank (as
            returned by :func:`sharded_knn`).
        group: process group (plain tensors only).
        sizes: every rank's ``n_r`` (gathered when ``None``).

    Returns:
        ``[E_r, d]`` in the points' dtype; for a ShardTensor input a ShardTensor ``[E, d]``
        (``Shard(0)``, ``E_r`` rows per rank: the edges in rank order) on the points' mesh.
    """
    points_owned, group, layout = _unwrap(points_owned, group, "edge_vectors")
    rank, world = msd.get_rank(group), msd.get_world_size(group)
    err = None
    try:
        if not isinstance(points_owned, torch.Tensor) or points_owned.dim() != 2 or not points_owned.is_floating_point():
            raise TypeError("points_owned must be a floating tensor [n, d]")
        if not isinstance(edge_index, torch.Tensor) or edge_index.dim() != 2 or edge_index.shape[0] != 2 \
                or edge_index.is_floating_point():
            raise TypeError("edge_index must be an integer tensor [2, E]")
    except TypeError as exc:
        err = exc
    msd.raise_together(err, "edge_vectors", group)
    if sizes is None:
        sizes = msd.all_gather_sizes([points_owned.shape[0]], group).view(-1).tolist()
    offsets = torch.zeros(world + 1, dtype=torch.long)
    offsets[1:] = torch.cumsum(torch.tensor(sizes, dtype=torch.long), 0)
    lo, hi = int(offsets[rank]), int(offsets[rank + 1])
    ei = edge_index.to(torch.long).cpu()
    src, dst = ei[0], ei[1]
    err = None
    if points_owned.shape[0] != hi - lo:
        err = ValueError(f"points_owned has {points_owned.shape[0]} rows but sizes[{rank}] = {hi - lo}")
    elif ei.numel() and (int(dst.min()) < lo or int(dst.max()) >= hi or int(src.min()) < 0 or int(src.max()) >= int(offsets[-1])):
        err = ValueError(f"edge targets must lie in [{lo}, {hi}) and sources in [0, {int(offsets[-1])})")
    msd.raise_together(err, "edge_vectors", group)
    vec = _fetch_rows(points_owned, src, offsets, rank, world, group) - points_owned[(dst - lo).to(points_owned.device)]
    return _wrap(vec, layout, None)


def _fetch_rows(values: torch.Tensor, gids: torch.Tensor, offsets: torch.Tensor, rank: int, world: int,
                group) -> torch.Tensor:
    """Rows ``gids`` (global, CPU ``[m]``) of a tensor whose rank ``r`` holds rows
    ``offsets[r]:offsets[r+1]`` as ``values`` (collective, differentiable: each remote row crosses
    the wire once, its gradient goes back to its owner summed over repeats).

    Returns:
        ``[m, *values.shape[1:]]`` on ``values``'s device.
    """
    from meshshard.distributed.autograd import indexed_all_to_all_v

    lo = int(offsets[rank])
    owner = torch.searchsorted(offsets, gids, right=True) - 1
    want = torch.unique(gids[owner != rank])  # sorted: grouped by owner
    want_owner = torch.searchsorted(offsets, want, right=True) - 1
    want_counts = torch.bincount(want_owner, minlength=world)
    cdev = msd.comm_device(group)
    give_counts = msd.all_to_all_single(want_counts.to(cdev), [1] * world, [1] * world, group).cpu()
    asked = msd.all_to_all_single((want - offsets[want_owner]).to(cdev), give_counts.tolist(), want_counts.tolist(), group).cpu()
    matrix = msd.all_gather_sizes(give_counts.tolist(), group)  # [W, W]: rows rank i sends to j
    dev = values.device
    indices = [t.to(dev) for t in torch.split(asked, give_counts.tolist())]
    fetched = indexed_all_to_all_v(values, indices, matrix, group=group)  # in `want` order
    ext = torch.cat([values, fetched], 0)
    row = torch.where(owner == rank, gids - lo, values.shape[0] + torch.searchsorted(want, gids))
    return ext[row.to(dev)]


# --------------------------------------------------------------------------- point-set searches
def _unwrap_sets(points, queries, features, group, what: str):
    """Local rows of points, queries and features, the group and the queries' layout (``None`` for
    plain tensors). Points and queries are both ShardTensors on one mesh, or both plain."""
    if isinstance(points, msd.DTensor) != isinstance(queries, msd.DTensor):
        raise TypeError(f"{what}: points and queries must both be ShardTensors or both plain tensors")
    p_loc, group_p, lay_p = _unwrap(points, group, what)
    q_loc, _, lay_q = _unwrap(queries, group, what)
    if lay_p is not None and (lay_p.mesh != lay_q.mesh or lay_p.mesh_dim != lay_q.mesh_dim):
        raise ValueError(f"{what}: points and queries must be sharded over the same device mesh dim, got meshes "
                         f"{lay_p.mesh} (dim {lay_p.mesh_dim}) and {lay_q.mesh} (dim {lay_q.mesh_dim})")
    f_loc = None
    if features is not None:
        if isinstance(features, msd.DTensor) != (lay_p is not None):
            raise TypeError(f"{what}: features must be a ShardTensor when the points are one, else a plain tensor")
        f_loc, _, lay_f = _unwrap(features, None, what)
        if lay_f is not None and lay_f != lay_p:
            raise ValueError(f"{what}: features must have the points' layout, got {lay_f.placements} on "
                             f"{lay_f.mesh}, points {lay_p.placements} on {lay_p.mesh}")
    return p_loc, q_loc, f_loc, group_p, lay_q


def _prepare_sets(p_loc, q_loc, f_loc, what: str, params: List[int], names: List[str], group):
    """:func:`_prepare` for points and queries (same point dim) and the features' row count.

    Returns:
        ``(pts, point sizes, point offsets, queries float64, query sizes, rank, world)``.
    """
    pts, psizes, poffsets, rank, world = _prepare(p_loc, what, params, names, group)
    qs, qsizes, _, _, _ = _prepare(q_loc, what + " (queries)", [], [], group)
    if qs.shape[1] != pts.shape[1]:  # both agreed across ranks: every rank raises alike
        raise ValueError(f"{what}: queries have dim {qs.shape[1]} but points have dim {pts.shape[1]}")
    err = None
    if f_loc is not None and (not isinstance(f_loc, torch.Tensor) or f_loc.dim() < 1 or f_loc.shape[0] != pts.shape[0]):
        err = ValueError(f"features must have one row per point ({pts.shape[0]} here), got "
                         f"{tuple(f_loc.shape) if isinstance(f_loc, torch.Tensor) else type(f_loc).__name__}")
    msd.raise_together(err, what, group)
    return pts, psizes, poffsets, qs, qsizes, rank, world


def _search_outputs(idx, dist, p_loc, f_loc, poffsets, rank, world, group, layout, qsizes,
                    return_dists: bool, return_points: bool):
    """Index ``[m, K]`` (``-1`` padding), then the requested distances / neighbour points /
    neighbour features (zeros where padded), each wrapped like the queries."""
    m, kk = idx.shape
    outs = [idx.to(p_loc.device)]
    valid = idx.reshape(-1) >= 0
    if return_dists:
        outs.append(torch.where(idx >= 0, dist, torch.zeros_like(dist)).to(device=p_loc.device, dtype=p_loc.dtype))
    for values, wanted in ((p_loc, return_points), (f_loc, f_loc is not None)):
        if not wanted:
            continue
        rows = _fetch_rows(values, idx.reshape(-1)[valid].cpu(), poffsets, rank, world, group)
        where = valid.nonzero().view(-1).to(values.device)
        full = rows.new_zeros((m * kk,) + tuple(values.shape[1:])).index_copy(0, where, rows)
        outs.append(full.view((m, kk) + tuple(values.shape[1:])))
    outs = [_wrap(t, layout, qsizes) for t in outs]
    return outs[0] if len(outs) == 1 else tuple(outs)


def knn_search(
    points,
    queries,
    k: int,
    return_dists: bool = False,
    return_points: bool = False,
    features=None,
    group=None,
    backend: Optional[str] = None,
    num_boxes: int = 16,
    workers: int = 1,
):
    r"""The ``k`` nearest points of every query, both sets split across ranks (collective).

    Like PyG's ``knn(x, y, k)`` (for each element of ``y`` = ``queries`` the ``k`` nearest of
    ``x`` = ``points``), exact, with ties broken by ``(distance, global id)``; the result is laid
    out per query row, as PhysicsNeMo's ``radius_search`` with ``max_points``. Only queries whose
    ball (radius: the ``k``-th local distance) touches another rank's points travel; points never do.

    Args:
        points: ShardTensor ``[N, d]`` (``Shard(0)``, uneven, empty shards allowed) or this rank's
            plain ``[n_r, d]`` points; finite.
        queries: ShardTensor ``[M, d]`` on the same mesh as ``points`` (any other sizes), or
            plain ``[m_r, d]`` when ``points`` is plain; finite.
        k: neighbours per query, ``1 <= k <= N``, same on every rank.
        return_dists: also return the distances ``[M, k]`` (the points' dtype; not differentiable:
            gather positions with ``return_points`` for gradients).
        return_points: also return the neighbours' coordinates ``[M, k, d]``, differentiable
            w.r.t. ``points``.
        features: optional ``[N, *F]`` laid out like ``points`` (a ShardTensor with the points'
            layout, or plain owned rows); returns the neighbours' rows ``[M, k, *F]``,
            differentiable (fetched with ``indexed_all_to_all_v``, each remote row once).
        group: process group for plain tensors (a ShardTensor brings its mesh's).
        backend, num_boxes, workers: as in :func:`sharded_knn`.

    Returns:
        ``indices`` ``LongTensor [M, k]``: global ids into ``points`` (``full_tensor`` row order),
        nearest first; then the distances, points and features when requested. For ShardTensor
        inputs every output is a ShardTensor laid out like ``queries`` (``Shard(0)``, the queries'
        shard sizes); for plain inputs, plain tensors of this rank's ``m_r`` query rows.

    Example::

        idx, nbr = knn_search(pos, probes, 8, return_points=True)   # ShardTensors like probes
        w = 1 / (nbr.to_local() - probes.to_local()[:, None]).norm(dim=-1)  # on local shards
    """
    what = "knn_search"
    p_loc, q_loc, f_loc, group, layout = _unwrap_sets(points, queries, features, group, what)
    err = None
    try:
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"k must be an int, got {type(k).__name__}")
        be = _backend(p_loc if isinstance(p_loc, torch.Tensor) else torch.empty(0), backend)
    except (TypeError, ValueError) as exc:
        err = exc
    msd.raise_together(err, what, group)
    pts, psizes, poffsets, qs, qsizes, rank, world = _prepare_sets(p_loc, q_loc, f_loc, what, [int(k)], ["k"], group)
    _check_k(int(k), int(sum(psizes)), True)  # every rank knows N: every rank raises alike
    k = int(k)
    m, dev = qs.shape[0], qs.device
    index = LocalIndex(pts, be, workers)
    ld, li = index.knn(qs, k)  # padded with inf / -1 where this rank has fewer than k points
    radius = ld[:, k - 1]
    remote = _ask_remote(qs, radius, index, rank, world, poffsets, group, num_boxes, _knn_answer(index, k), {})
    ok = li >= 0
    qrow = torch.arange(m, device=dev)[:, None].expand_as(li)
    _, gid, dist = _merge(m, (qrow[ok], li[ok] + poffsets[rank], ld[ok]), remote, k)
    return _search_outputs(gid.view(m, k), dist.view(m, k), p_loc, f_loc, poffsets, rank, world, group, layout, qsizes,
                           return_dists, return_points)


def radius_search(
    points,
    queries,
    radius: float,
    max_points: Optional[int] = None,
    return_dists: bool = False,
    return_points: bool = False,
    features=None,
    group=None,
    backend: Optional[str] = None,
    num_boxes: int = 16,
    workers: int = 1,
):
    r"""Every point within ``radius`` of each query, both sets split across ranks (collective).

    PhysicsNeMo's ``radius_search(points, queries, radius, max_points, return_dists,
    return_points)`` with its padded layout (unused slots: index ``-1``, distance and point ``0``),
    exact and deterministic: neighbours are ordered by ``(distance, global id)`` and
    ``max_points`` keeps the nearest. With ``max_points=None`` the width is the largest neighbour
    count of any query (agreed across ranks; PhysicsNeMo returns an edge list then).

    Args:
        points, queries, return_dists, return_points, features, group, backend, num_boxes,
            workers: as in :func:`knn_search`.
        radius: ``>= 0``; points at distance ``<= radius`` count.
        max_points: ``None`` or the most neighbours kept per query (``>= 1``).

    Returns:
        ``indices`` ``LongTensor [M, K]`` (``K = max_points`` or the largest count), global ids into
        ``points``, nearest first, ``-1`` padded; then the requested distances ``[M, K]``, points
        ``[M, K, d]`` and features ``[M, K, *F]``, laid out like ``queries`` as in
        :func:`knn_search`. ``(indices >= 0).sum(1)`` counts each query's neighbours.
    """
    what = "radius_search"
    p_loc, q_loc, f_loc, group, layout = _unwrap_sets(points, queries, features, group, what)
    err = None
    try:
        _check_radius(radius, max_points, "max_points")
        be = _backend(p_loc if isinstance(p_loc, torch.Tensor) else torch.empty(0), backend)
    except (TypeError, ValueError) as exc:
        err = exc
    msd.raise_together(err, what, group)
    r = float(radius)
    rbits = int(np.array(r, dtype=np.float64).view(np.int64))
    mnn = -1 if max_points is None else int(max_points)
    pts, psizes, poffsets, qs, qsizes, rank, world = _prepare_sets(
        p_loc, q_loc, f_loc, what, [rbits, mnn], ["radius (bits)", "max_points"], group)
    m, dev = qs.shape[0], qs.device
    index = LocalIndex(pts, be, workers)
    lq, li, ldist = index.ball(qs, r, max_num=max_points)

    def answer(q, rq):
        return index.ball(q, r, max_num=max_points)

    remote = _ask_remote(qs, torch.full((m,), r, dtype=torch.float64, device=dev), index, rank, world, poffsets, group,
                         num_boxes, answer, {})
    qid, gid, dist = _merge(m, (lq, li + poffsets[rank], ldist), remote, max_points)
    counts = torch.bincount(qid, minlength=m)
    width = max_points if max_points is not None else \
        int(msd.all_gather_sizes([int(counts.max()) if m else 0], group).max())
    slot = rank_in_group(qid, m)
    idx = torch.full((m, width), -1, dtype=torch.long, device=dev)
    dst = torch.zeros(m, width, dtype=torch.float64, device=dev)
    idx[qid, slot] = gid
    dst[qid, slot] = dist
    return _search_outputs(idx, dst, p_loc, f_loc, poffsets, rank, world, group, layout, qsizes,
                           return_dists, return_points)
