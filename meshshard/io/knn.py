"""Deterministic k-nearest-neighbour graph of a point cloud (scipy cKDTree)."""
from __future__ import annotations

import numbers

import numpy as np
import torch

__all__ = ["knn_graph"]


# |x| beyond 2**500 (or all below 2**-500) would overflow (underflow) squared distances in float64
_SAFE_EXP = 500


def _safe_scale(pts: np.ndarray) -> np.ndarray:
    """Scale by a power of two into a range where squared distances neither overflow nor
    underflow. Scaling by 2**k is exact, so neighbours and ties are those of the input."""
    if pts.size == 0:
        return pts
    big = float(np.abs(pts).max())
    if big == 0.0 or 2.0**-_SAFE_EXP <= big <= 2.0**_SAFE_EXP:
        return pts
    return np.ldexp(pts, -int(np.frexp(big)[1]))


def knn_graph(points, k: int, loop: bool = False, workers: int = -1) -> torch.Tensor:
    r"""k-nearest-neighbour graph in PyG's ``source_to_target`` flow.

    Ties are broken deterministically: neighbours are ordered by (distance, global id), so among
    points at the same distance the lower id wins, also at the k-th place and for duplicate points.

    Args:
        points: float array or tensor [N, d], finite.
        k: neighbours per point, ``1 <= k <= N - 1`` (``<= N`` with ``loop=True``).
        loop: if True a point counts as its own nearest neighbour (as cKDTree does); if False
            (PyG's default) it is left out.
        workers: cKDTree query threads (-1: all cores).

    Returns:
        LongTensor [2, N * k]: row 0 the neighbour (source), row 1 the query point (target);
        grouped by query in increasing id, neighbours nearest first.
    """
    from scipy.spatial import cKDTree

    if isinstance(points, torch.Tensor):
        points = points.detach().cpu().numpy()
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] < 1:
        raise ValueError(f"points must have shape [N, d], got {tuple(pts.shape)}")
    if not np.issubdtype(pts.dtype, np.number) or np.issubdtype(pts.dtype, np.complexfloating):
        raise TypeError(f"points must be real numbers, got dtype {pts.dtype}")
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    k = int(k)
    n = pts.shape[0]
    pts = pts.astype(np.float64, copy=False)
    if not np.isfinite(pts).all():
        raise ValueError("points must be finite (found NaN or inf)")
    kmax = n if loop else n - 1
    if k < 1 or k > kmax:
        raise ValueError(f"k must be in [1, {kmax}] for {n} points with loop={loop}, got {k}")

    pts = _safe_scale(pts)
    tree = cKDTree(pts)
    need = k if loop else k + 1  # the query point itself is always among its nearest (distance 0)
    out = np.empty((n, k), dtype=np.int64)
    todo = np.arange(n)
    m = min(n, need + 2)  # a little slack so that most ties at the k-th distance resolve at once
    while todo.size:
        dist, idx = tree.query(pts[todo], k=m, workers=workers)
        dist = dist.reshape(len(todo), m)
        idx = idx.reshape(len(todo), m).astype(np.int64)
        if (idx >= n).any():  # cKDTree's "no neighbour" marker: distances overflowed
            raise ValueError("knn_graph: squared distances overflow float64; rescale the points")
        # The window is complete when no point beyond it can tie the needed distance: either it
        # holds all points, or its last distance is strictly larger.
        done = (m == n) | (dist[:, m - 1] > dist[:, need - 1])
        rows = todo[done]
        d, i = dist[done], idx[done]
        order = np.lexsort((i, d), axis=1)  # by distance, then by id
        i = np.take_along_axis(i, order, axis=1)
        if not loop:
            # drop the query point itself (exactly one entry per row), wherever ties put it
            keep = i != rows[:, None]
            i = i[keep].reshape(len(rows), m - 1)
        out[rows] = i[:, :k]
        todo = todo[~done]
        m = min(n, 2 * m)
    query = np.repeat(np.arange(n, dtype=np.int64), k)
    return torch.from_numpy(np.stack([out.reshape(-1), query]))
