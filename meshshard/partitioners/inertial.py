"""Recursive inertial bisection: cut each subdomain across its principal axis."""
from __future__ import annotations

from typing import Optional

import numpy as np

from meshshard.partitioners._runs import balanced_runs

__all__ = ["principal_axis", "rib_assignment"]


def _normalized(points: np.ndarray) -> np.ndarray:
    """Points moved to their bounding-box centre and scaled into ``[-1, 1]`` (no overflow, even
    near 1e308, and no loss of the spread of a cloud far from the origin)."""
    lo, hi = points.min(axis=0), points.max(axis=0)
    rows = points - (lo * 0.5 + hi * 0.5)  # |x - centre| <= half the extent: finite
    scale = np.abs(rows).max() if rows.size else 0.0
    return rows / scale if scale > 0 else rows


def principal_axis(points: np.ndarray, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Unit direction of largest (weighted) spread of a point set, through scikit-learn's PCA.

    PCA has no sample weights, so the rows are centred on the weighted mean and scaled by
    ``sqrt(w)``: their second-moment matrix is then the weighted covariance. PCA centres its input
    again; stacking the rows with their negatives makes that mean exactly zero, so PCA's own
    centring changes nothing.

    Args:
        points: ``[m, d]`` float64 coordinates, ``m >= 1``.
        weights: optional float64 ``[m]`` non-negative weights (all zero: unweighted).

    Returns:
        float64 ``[d]`` unit vector (sign as scikit-learn's deterministic ``svd_flip`` sets it);
        the first axis for a point set without spread.
    """
    from sklearn.decomposition import PCA

    points = _normalized(points)
    dim = points.shape[1]
    if weights is not None and not weights.sum() > 0:
        weights = None
    if weights is None:
        rows = points - points.mean(axis=0)
    else:
        mean = (weights / weights.sum()) @ points
        rows = (points - mean) * np.sqrt(weights)[:, None]
    if not np.abs(rows).max(initial=0.0) > 0:
        axis = np.zeros(dim)
        axis[0] = 1.0
        return axis
    rows = np.concatenate([rows, -rows])
    return PCA(n_components=1, svd_solver="full").fit(rows).components_[0]


def rib_assignment(points: np.ndarray, num_parts: int, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Recursive inertial bisection into any number of parts.

    A subdomain holding ``k`` parts is projected on its weighted principal axis
    (:func:`principal_axis`) and cut into ``k // 2`` and ``k - k // 2`` parts where the weight
    splits in that ratio, as :func:`~meshshard.partitioners.kdtree.rcb_assignment` does along a
    coordinate axis; ties in the projection go by global id, so the result is deterministic.
    Unlike coordinate bisection, the cuts follow the geometry: a rotated or elongated domain is
    cut across its long axis.

    Args:
        points: ``[N, d]`` float coordinates.
        num_parts: ``1 <= P <= N``.
        weights: optional float64 ``[N]`` non-negative node weights.

    Returns:
        int64 ``[N]`` part ids; every part non-empty.
    """
    n = points.shape[0]
    pts = np.asarray(points, dtype=np.float64)
    assign = np.empty(n, dtype=np.int64)
    stack = [(np.arange(n, dtype=np.int64), 0, num_parts)]  # ids (increasing), first part, parts
    while stack:
        ids, first, k = stack.pop()
        if k == 1:
            assign[ids] = first
            continue
        k_left = k // 2
        sub = _normalized(pts[ids])
        w = None if weights is None else weights[ids]
        proj = sub @ principal_axis(sub, w)
        side = balanced_runs(proj, w, [k_left / k], [k_left, k - k_left])
        stack.append((ids[side == 1], first + k_left, k - k_left))
        stack.append((ids[side == 0], first, k_left))
    return assign
