"""Partitioning a point set that no single process holds (layer 3).

Every rank passes its slice of the points; the keys, the cut and the delivery of each part to its
rank run over the layer-0 collectives, and the result equals ``ms.partition`` of the concatenated
slices with ``refine=False``:

- ``"morton"`` / ``"hilbert"``: curve keys against the global bounding box (an all-reduce of
  per-rank bounds), a parallel sample sort by ``(key, global id)``, then the cut of the sorted
  sequence at the weighted prefix nearest each ``j / P`` of the total, as the single-process
  cut does (:mod:`meshshard.partitioners._runs`).
- ``"kdtree"``: recursive coordinate bisection, one tree level at a time; a box's widest axis
  comes from all-reduced bounds and its cut from a distributed radix selection of the item at
  the cut in ``(coordinate, global id)`` order (a few all-reduced histograms), so no points move
  until the parts are known.

Equality is exact for unit weights and integer-valued weights (their prefix sums are exact in
float64 below 2**53); real-valued weights sum in a different order over ranks than in one
process, so a cut may differ by one node where two candidates lie within rounding of the target.
There is no boundary refinement (it needs the graph around the cut; refine the parts afterwards
if needed).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np
import torch

from meshshard import distributed as msd
from meshshard.partitioners._kernels.runs import enforce_min_sizes
from meshshard.partitioners._validate import as_points, check_num_parts, to_numpy
from meshshard.partitioners.sfc import hilbert_keys, morton_keys

__all__ = ["DistributedPartition", "partition_distributed", "DISTRIBUTED_METHODS"]

#: methods :func:`partition_distributed` runs
DISTRIBUTED_METHODS = ("kdtree", "morton", "hilbert")

_SAMPLES_PER_RANK = 16  # regular samples per rank for the sample sort's splitters
_TOP = np.uint64(1 << 63)


@dataclasses.dataclass
class DistributedPartition:
    r"""This rank's share of a partition computed by :func:`partition_distributed`.

    Part ``p`` goes to rank ``p * W // num_parts`` (rank ``p`` when ``num_parts`` equals the
    world size ``W``). Every tensor lies on the device of the rank's input points (the CPU for
    numpy input): the keys, sort and cut run on the host either way.

    Args:
        points: ``[n_owned, d]`` the points of this rank's parts, grouped by part, increasing
            global id within a part (a :class:`~meshshard.Partition`'s ``perm`` order); the
            input's dtype.
        global_ids: ``LongTensor [n_owned]`` their ids in the concatenation of the input slices
            in rank order (rank ``r``'s row ``i`` has id ``sum(n_0..n_{r-1}) + i``).
        parts: ``LongTensor [n_owned]`` the part of each owned point.
        assignment: ``LongTensor [n_local]`` the part of each row of this rank's input slice.
        num_parts: ``P``.
        sizes: nodes in each of the ``P`` parts (the same list on every rank).
        weights: ``DoubleTensor [n_owned]`` the owned points' weights, or None when unweighted.
        method: the method that produced it.
    """

    points: torch.Tensor
    global_ids: torch.Tensor
    parts: torch.Tensor
    assignment: torch.Tensor
    num_parts: int
    sizes: List[int]
    weights: Optional[torch.Tensor]
    method: str

    def to(self, device) -> "DistributedPartition":
        """The same partition with every tensor on ``device``."""
        moved = {f.name: getattr(self, f.name).to(device) for f in dataclasses.fields(self)
                 if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **moved)


def _local_input(points_local, weights):
    """This rank's points and weights checked as ``partition`` checks them, except that a slice
    may weigh nothing (only the global sum must be positive)."""
    pts = as_points(points_local)
    w = None
    if weights is not None:
        w = to_numpy(weights, "weights")
        if w.dtype == np.bool_ or not (np.issubdtype(w.dtype, np.integer) or np.issubdtype(w.dtype, np.floating)):
            raise TypeError(f"weights must hold real numbers, got dtype {w.dtype}")
        w = w.astype(np.float64, copy=False)
        if w.ndim != 1 or w.shape[0] != pts.shape[0]:
            raise ValueError(f"weights must have shape [n_local] = [{pts.shape[0]}], got {tuple(w.shape)}")
        if not np.isfinite(w).all():
            raise ValueError("weights hold NaN or inf")
        if (w < 0).any():
            raise ValueError(f"weights must be non-negative, got minimum {float(w.min())}")
    return pts, w


def _exchange(columns: np.ndarray, dest: np.ndarray, world: int, group) -> np.ndarray:
    """Send row ``i`` of an int64 ``[n, c]`` matrix to rank ``dest[i]``; rows received, by source rank."""
    order = np.argsort(dest, kind="stable")
    send = np.bincount(dest, minlength=world).astype(np.int64)
    counts = msd.all_gather_sizes(send, group).numpy()  # [W, W]: counts[i, j] rows i -> j
    rank = msd.get_rank(group)
    out = msd.all_to_all_single(torch.from_numpy(np.ascontiguousarray(columns[order])),
                                output_split_sizes=counts[:, rank].tolist(), input_split_sizes=send.tolist(),
                                group=group)
    return out.numpy()


def _float_columns(a: np.ndarray) -> np.ndarray:
    """float64 columns as int64 bit patterns (exact transport inside an int64 matrix)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def _ordered_bits(v: np.ndarray) -> np.ndarray:
    """uint64 keys in the order of the float values (``-0.0`` equal to ``0.0``, as ``<`` has it)."""
    bits = (np.asarray(v, dtype=np.float64) + 0.0).view(np.uint64)
    neg = bits >= _TOP
    return np.where(neg, ~bits, bits | _TOP)


def _deliver(pts, w, gid, assign, num_parts, world, group, method) -> DistributedPartition:
    """Move every point to the rank of its part; sizes of all parts."""
    owner = assign * world // num_parts
    dim = pts.shape[1]
    cols = [gid[:, None], assign[:, None], _float_columns(pts)]
    if w is not None:
        cols.append(_float_columns(w[:, None]))
    got = _exchange(np.concatenate(cols, axis=1), owner, world, group)
    order = np.lexsort((got[:, 0], got[:, 1]))  # by part, then global id
    got = got[order]
    points = np.ascontiguousarray(got[:, 2:2 + dim]).view(np.float64).astype(pts.dtype, copy=False)
    weights = None if w is None else torch.from_numpy(np.ascontiguousarray(got[:, 2 + dim]).view(np.float64).copy())
    sizes = torch.from_numpy(np.bincount(assign, minlength=num_parts).astype(np.int64))
    msd.all_reduce(sizes, group=group)
    return DistributedPartition(points=torch.from_numpy(np.ascontiguousarray(points)),
                                global_ids=torch.from_numpy(got[:, 0].copy()),
                                parts=torch.from_numpy(got[:, 1].copy()),
                                assignment=torch.from_numpy(assign),
                                num_parts=num_parts, sizes=sizes.tolist(), weights=weights, method=method)


# ---- space-filling curves: sample sort, then the weighted cut -------------------------------------

def _lex_count_below(keys: np.ndarray, ids: np.ndarray, key: int, gid: int) -> int:
    """Items of a ``(key, id)``-sorted array that come before ``(key, gid)``."""
    a = int(np.searchsorted(keys, np.uint64(key), side="left"))
    b = int(np.searchsorted(keys, np.uint64(key), side="right"))
    return a + int(np.searchsorted(ids[a:b], gid, side="left"))


def _curve_assignment(pts, w, total, gid, offsets, num_parts, method, world, group) -> np.ndarray:
    n = int(offsets[-1])
    rank = msd.get_rank(group)
    dim = pts.shape[1]
    lo = np.array([pts[:, j].min() if pts.shape[0] else np.inf for j in range(dim)], dtype=np.float64)
    hi = np.array([pts[:, j].max() if pts.shape[0] else -np.inf for j in range(dim)], dtype=np.float64)
    box = msd.all_reduce(torch.from_numpy(np.concatenate([-lo, hi])), op=msd.ReduceOp.MAX, group=group).numpy()
    keys_fn = morton_keys if method == "morton" else hilbert_keys
    keys = keys_fn(pts, bounds=(-box[:dim], box[dim:]))

    # sample sort by (key, global id)
    order = np.lexsort((gid, keys))
    keys, ids = keys[order], gid[order]
    wts = None if w is None else w[order]
    m = keys.shape[0]
    picks = (np.arange(_SAMPLES_PER_RANK) * m) // _SAMPLES_PER_RANK if m else np.zeros(0, dtype=np.int64)
    samples = sorted({(int(keys[i]), int(ids[i])) for i in picks})
    every = sorted(s for part in msd.all_gather_object(samples, group) for s in part)
    splitters = [every[(j * len(every)) // world] for j in range(1, world)]
    cuts = [_lex_count_below(keys, ids, k, g) for k, g in splitters]
    dest = np.searchsorted(np.asarray(cuts, dtype=np.int64), np.arange(m), side="right")
    cols = [keys.view(np.int64)[:, None], ids[:, None]]
    if wts is not None:
        cols.append(_float_columns(wts[:, None]))
    got = _exchange(np.concatenate(cols, axis=1), dest, world, group)
    got = got[np.lexsort((got[:, 1], got[:, 0].view(np.uint64)))]
    ids = got[:, 1]
    block = got.shape[0]
    wb = np.ones(block) if wts is None else np.ascontiguousarray(got[:, 2]).view(np.float64)

    # global prefix weights: block totals added in rank order (exact for integer weights)
    local_cum = np.cumsum(wb)
    stats = msd.all_gather_into_tensor(torch.tensor([float(block), float(local_cum[-1]) if block else 0.0],
                                                    dtype=torch.float64), group).numpy()
    start = int(stats[:rank, 0].sum())
    offset = 0.0
    for r in range(rank):
        offset += float(stats[r, 1])
    prefix = offset + local_cum  # cum[start + i + 1] of the single-process order
    targets = (np.arange(1, num_parts) / num_parts) * total

    # searchsorted(cum, t, "left") over cum = [0, prefix of every item]: entries below t
    below_here = torch.from_numpy(np.searchsorted(prefix, targets, side="left").astype(np.int64))
    msd.all_reduce(below_here, group=group)
    k = np.clip(below_here.numpy() + (targets > 0), 0, n)

    # cum[k] and cum[k - 1]: the prefix of item k - 1 (0 for k = 0), from the rank that holds it;
    # the others add exact zeros
    below = np.maximum(k - 1, 0)
    pos = np.stack([k, below]) - 1 - start
    mine = (pos >= 0) & (pos < block)
    vals = np.where(mine, prefix[np.clip(pos, 0, max(block - 1, 0))] if block else 0.0, 0.0)
    cum_k, cum_below = msd.all_reduce(torch.from_numpy(vals), group=group).numpy()
    take_below = (k > 0) & ((targets - cum_below) <= (cum_k - targets))
    pos = np.where(take_below, below, k)
    pos = enforce_min_sizes(pos.astype(np.int64), np.ones(num_parts, dtype=np.int64), n)

    part = np.searchsorted(pos, start + np.arange(block), side="right").astype(np.int64)
    origin = np.searchsorted(offsets[1:], ids, side="right")
    back = _exchange(np.stack([ids, part], axis=1), origin, world, group)
    assign = np.empty(pts.shape[0], dtype=np.int64)
    assign[back[:, 0] - offsets[rank]] = back[:, 1]
    return assign


def _global_sum(w: np.ndarray, group) -> float:
    t = torch.tensor([float(w.sum())], dtype=torch.float64)
    return float(msd.all_reduce(t, group=group).item())


# ---- k-d tree: level-synchronous bisection with a distributed radix selection ---------------------

def _select(keys, ids, wts, targets, gid_bits, group):
    """For each segment, the first item ``x`` in ``(key, id)`` order whose prefix weight (count
    when ``wts`` is None) reaches the target, found digit by digit from all-reduced histograms.

    Args:
        keys, ids: per segment, this rank's members' uint64 coordinate keys and int64 global ids.
        wts: per segment, their float64 weights, or None.
        targets: float64 ``[S]``.

    Returns per segment ``(key_x, id_x, count before x, weight before x, weight of x)``.
    """
    num = len(keys)
    # 16-bit digits: 4 rounds for the coordinate, 1-3 for the id; collectives cost more than
    # the histograms' length (narrower digits only when many segments would make them large)
    bits = 16 if num * (1 << 16) <= (1 << 22) else 8
    buckets = 1 << bits
    cand = [np.arange(k.shape[0]) for k in keys]  # candidates shrink every round
    c_before = np.zeros(num, dtype=np.int64)
    w_before = np.zeros(num)
    w_x = np.zeros(num)
    x_key = np.zeros(num, dtype=np.uint64)
    x_gid = np.zeros(num, dtype=np.int64)
    gid_width = -(-max(gid_bits, 1) // bits) * bits
    plan = [(0, 64 - bits * (i + 1)) for i in range(64 // bits)]
    plan += [(1, gid_width - bits * (i + 1)) for i in range(gid_width // bits)]
    for which, shift in plan:
        # counts and weights in one all-reduce (counts are exact in float64)
        hist = np.zeros((2 if wts is not None else 1, num, buckets))
        digits = []
        for s in range(num):
            source = keys[s] if which == 0 else ids[s].view(np.uint64)
            d = ((source[cand[s]] >> np.uint64(shift)) & np.uint64(buckets - 1)).astype(np.int64)
            digits.append(d)
            hist[0, s] = np.bincount(d, minlength=buckets)
            if wts is not None:
                hist[1, s] = np.bincount(d, weights=wts[s][cand[s]], minlength=buckets)
        hist = msd.all_reduce(torch.from_numpy(hist), group=group).numpy()
        hist_c = hist[0].astype(np.int64)
        hist_w = hist[1] if wts is not None else hist[0]
        for s in range(num):
            cum = w_before[s] + np.cumsum(hist_w[s])
            ok = np.flatnonzero((hist_c[s] > 0) & (cum >= targets[s]))
            b = int(ok[0]) if ok.size else int(np.flatnonzero(hist_c[s] > 0)[-1])  # rounding: the last item
            w_before[s] += float(hist_w[s][:b].sum())
            c_before[s] += int(hist_c[s][:b].sum())
            w_x[s] = hist_w[s][b]
            cand[s] = cand[s][digits[s] == b]
            if which == 0:
                x_key[s] |= np.uint64(b) << np.uint64(shift)
            else:
                x_gid[s] |= b << shift
    return x_key, x_gid, c_before, w_before, w_x


def _kdtree_assignment(pts, w, gid, n, num_parts, group) -> np.ndarray:
    dim = pts.shape[1]
    ftype = pts.dtype.type
    first = np.zeros(pts.shape[0], dtype=np.int64)
    count = np.full(pts.shape[0], num_parts, dtype=np.int64)
    segs = [(0, num_parts)]
    gid_bits = max(int(n - 1).bit_length(), 1)
    while any(k > 1 for _, k in segs):
        active = [(f, k) for f, k in segs if k > 1]
        num = len(active)
        # this rank's members of each active segment (segments are disjoint; first ids unique)
        slot = np.full(num_parts, -1, dtype=np.int64)
        slot[[f for f, _ in active]] = np.arange(num)
        seg = np.where(count > 1, slot[first], -1)
        order = np.argsort(seg, kind="stable")
        bounds_at = np.searchsorted(seg[order], np.arange(num + 1), side="left")
        members = [order[bounds_at[s]:bounds_at[s + 1]] for s in range(num)]  # increasing local index
        lo = np.full((num, dim), np.inf)
        hi = np.full((num, dim), -np.inf)
        sums = np.zeros((num, 2))
        for s, idx in enumerate(members):
            sums[s, 0] = idx.shape[0]
            if idx.shape[0]:
                sub = pts[idx]
                lo[s] = [sub[:, j].min() for j in range(dim)]
                hi[s] = [sub[:, j].max() for j in range(dim)]
                if w is not None:
                    sums[s, 1] = float(w[idx].sum())
        sums = msd.all_reduce(torch.from_numpy(sums), group=group).numpy()
        box = msd.all_reduce(torch.from_numpy(np.concatenate([-lo, hi], axis=1)), op=msd.ReduceOp.MAX,
                             group=group).numpy()
        m_all, totals = sums[:, 0].astype(np.int64), sums[:, 1]
        keys, ids, wts = [], [], None if w is None else []
        for s, idx in enumerate(members):
            # the single-process extent expression, in the points' dtype
            ext = [float(ftype(box[s, dim + j]) * 0.5 - ftype(-box[s, j]) * 0.5) for j in range(dim)]
            keys.append(_ordered_bits(pts[idx, int(np.argmax(ext))]))
            ids.append(gid[idx])
            if w is not None:
                wts.append(w[idx])
        k_left = np.array([k // 2 for _, k in active])
        k_right = np.array([k - k // 2 for _, k in active])
        if w is None:
            n_left = np.array([int(round(int(m_all[s]) * int(k_left[s]) / active[s][1])) for s in range(num)])
            n_left = np.minimum(np.maximum(n_left, k_left), m_all - k_right)
            x_key, x_gid, _, _, _ = _select(keys, ids, None, n_left.astype(np.float64), gid_bits, group)
            inclusive = np.ones(num, dtype=bool)
        else:
            targets = np.array([totals[s] * int(k_left[s]) / active[s][1] for s in range(num)])
            x_key, x_gid, c_before, w_lo, w_x = _select(keys, ids, wts, targets, gid_bits, group)
            hi_n = c_before + 1
            w_hi = w_lo + w_x
            n_left = np.where(targets - w_lo <= w_hi - targets, c_before, hi_n)  # nearest; ties: shorter
            clamped = np.minimum(np.maximum(n_left, k_left), m_all - k_right)
            inclusive = clamped == hi_n  # else: n_left == c_before, the items before x
            redo = np.flatnonzero((clamped != n_left) & (clamped != hi_n))
            if redo.size:  # a minimum part size moved the cut: select by count
                rk, rg, _, _, _ = _select([keys[s] for s in redo], [ids[s] for s in redo], None,
                                          clamped[redo].astype(np.float64), gid_bits, group)
                x_key[redo], x_gid[redo], inclusive[redo] = rk, rg, True
        for s, (f, k) in enumerate(active):
            key, ident, idx = keys[s], ids[s], members[s]
            tie = (ident <= x_gid[s]) if inclusive[s] else (ident < x_gid[s])
            left = (key < x_key[s]) | ((key == x_key[s]) & tie)
            count[idx[left]] = k_left[s]
            first[idx[~left]] = f + k_left[s]
            count[idx[~left]] = k_right[s]
        segs = [c for f, k in segs for c in (((f, k // 2), (f + k // 2, k - k // 2)) if k > 1 else ((f, k),))]
    return first


def partition_distributed(
    points_local,
    num_parts: Optional[int] = None,
    method: str = "hilbert",
    *,
    weights=None,
    group=None,
) -> DistributedPartition:
    r"""Partition a point set spread over ranks; each rank receives the points of its parts.

    Every rank calls it with its own slice (uneven sizes, empty slices allowed). The assignment
    equals ``ms.partition(concatenated slices, num_parts, method, weights=..., refine=False)``
    (exactly for unit or integer-valued weights; see the module notes), without any process
    ever holding all points. Collective: every rank of ``group`` must call it.

    Args:
        points_local: ``[n_local, d]`` (d = 2 or 3) finite coordinates of this rank's slice
            (numpy or torch; float32 kept, other dtypes become float64; when the ranks differ,
            all use float64).
        num_parts: ``1 <= P <= N`` (default: the world size). Part ``p`` goes to rank
            ``p * W // P``.
        method: ``"hilbert"``, ``"morton"`` or ``"kdtree"``.
        weights: optional ``[n_local]`` non-negative node weights of the slice (every rank gives
            them or none does; the global sum must be positive).
        group: process group (default: the default group; works without one as a single rank).

    Returns:
        :class:`DistributedPartition`: this rank's points, their global ids and parts, and the
        part of each input row, on the device of ``points_local``.

    Raises:
        ValueError / TypeError on every rank (naming the rank) when any rank's input is bad.
    """
    world, rank = msd.get_world_size(group), msd.get_rank(group)
    err = None
    pts = w = None
    try:
        if not isinstance(method, str) or method not in DISTRIBUTED_METHODS:
            raise ValueError(f"unknown method {method!r} for partition_distributed; valid: {list(DISTRIBUTED_METHODS)}")
        pts, w = _local_input(points_local, weights)
    except (ValueError, TypeError) as exc:
        err = exc
    msd.raise_together(err, "partition_distributed", group)
    info = msd.all_gather_sizes([pts.shape[0], pts.shape[1], int(pts.dtype == np.float32), int(w is not None)],
                                group).numpy()
    if len(set(info[:, 1].tolist())) > 1:
        raise ValueError(f"partition_distributed: ranks hold points of different dimensions {info[:, 1].tolist()}")
    if len(set(info[:, 3].tolist())) > 1:
        raise ValueError("partition_distributed: weights given on some ranks but not on others "
                         f"(ranks with weights: {np.flatnonzero(info[:, 3]).tolist()})")
    if not info[:, 2].all():
        pts = pts.astype(np.float64, copy=False)
    offsets = np.zeros(world + 1, dtype=np.int64)
    np.cumsum(info[:, 0], out=offsets[1:])
    n = int(offsets[-1])
    num_parts = check_num_parts(world if num_parts is None else num_parts, n)
    total = float(n) if w is None else _global_sum(w, group)
    if not total > 0:
        raise ValueError("partition_distributed: weights sum to zero over all ranks: nothing to balance")
    gid = offsets[rank] + np.arange(pts.shape[0], dtype=np.int64)
    if num_parts == 1:
        assign = np.zeros(pts.shape[0], dtype=np.int64)
    elif method == "kdtree":
        assign = _kdtree_assignment(pts, w, gid, n, num_parts, group)
    else:
        assign = _curve_assignment(pts, w, total, gid, offsets, num_parts, method, world, group)
    out = _deliver(pts, w, gid, assign, num_parts, world, group, method)
    if isinstance(points_local, torch.Tensor) and points_local.device.type != "cpu":
        out = out.to(points_local.device)
    return out
