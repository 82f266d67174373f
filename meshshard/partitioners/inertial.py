"""Recursive inertial bisection: cut each subdomain across its principal axis."""
from __future__ import annotations

from typing import Optional

import numpy as np

from meshshard.partitioners._kernels.inertia import segment_inertia, segment_projection
from meshshard.partitioners._runs import bisect_range

__all__ = ["principal_axis", "rib_assignment"]

_UNIT = np.empty(0)  # segment_inertia's unit weights


def _top_axis(cov: np.ndarray) -> np.ndarray:
    """The unit eigenvector of the largest eigenvalue of the symmetric ``[d, d]`` ``cov``, its largest entry (by
    magnitude, the first on ties) positive, as scikit-learn's PCA signs its components; the first axis when ``cov``
    is zero (no spread)."""
    dim = cov.shape[0]
    if not np.abs(cov).max(initial=0.0) > 0:
        axis = np.zeros(dim)
        axis[0] = 1.0
        return axis
    axis = np.linalg.eigh(cov)[1][:, -1]  # eigenvalues ascending
    return axis if axis[np.argmax(np.abs(axis))] > 0 else -axis


def _weights_or_unit(weights: Optional[np.ndarray], ids: np.ndarray) -> np.ndarray:
    """``weights`` for :func:`~meshshard.partitioners._kernels.inertia.segment_inertia`: unit weights when there are
    none or those of the nodes ``ids`` sum to zero (an all-zero subdomain is cut as if unweighted)."""
    if weights is None or not weights.take(ids).sum() > 0:
        return _UNIT
    return weights


def principal_axis(points: np.ndarray, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Unit direction of largest (weighted) spread of a point set: the top eigenvector of the weighted covariance.

    The points are first moved to the centre of their bounding box and scaled into ``[-1, 1]`` (no overflow, even
    near 1e308, and no loss of the spread of a cloud far from the origin); the ``d x d`` covariance is summed in
    compiled passes (:func:`~meshshard.partitioners._kernels.inertia.segment_inertia`), so no ``[m, d]`` copy is
    decomposed.

    Args:
        points: ``[m, d]`` float coordinates, ``m >= 1``.
        weights: optional float64 ``[m]`` non-negative weights (all zero: unweighted).

    Returns:
        float64 ``[d]`` unit vector, its largest entry (by magnitude) positive, as scikit-learn's PCA signs it; the
        first axis for a point set without spread.
    """
    coords = np.ascontiguousarray(points, dtype=np.float64)
    ids = np.arange(coords.shape[0], dtype=np.int64)
    w = _weights_or_unit(None if weights is None else np.ascontiguousarray(weights, dtype=np.float64), ids)
    return _top_axis(segment_inertia(coords, w, ids, 0, ids.shape[0])[2])


def rib_assignment(points: np.ndarray, num_parts: int, weights: Optional[np.ndarray] = None) -> np.ndarray:
    """Recursive inertial bisection into any number of parts.

    A subdomain holding ``k`` parts is projected on its weighted principal axis (as :func:`principal_axis`) and
    cut into ``k // 2`` and ``k - k // 2`` parts where the weight splits in that ratio, as
    :func:`~meshshard.partitioners.kdtree.rcb_assignment` does along a coordinate axis (the same cut:
    :func:`~meshshard.partitioners._runs.bisect_range`); ties in the projection go by global id, so the result is
    deterministic. Unlike coordinate bisection, the cuts follow the geometry: a rotated or elongated domain is cut
    across its long axis. Each subdomain costs compiled passes over its points and, unweighted, a linear-time
    selection (no sort), so the whole is about as fast as coordinate bisection.

    Args:
        points: ``[N, d]`` float coordinates.
        num_parts: ``1 <= P <= N``.
        weights: optional float64 ``[N]`` non-negative node weights.

    Returns:
        int64 ``[N]`` part ids; every part non-empty.
    """
    n = points.shape[0]
    coords = np.ascontiguousarray(points, dtype=np.float64)
    if weights is not None:
        weights = np.ascontiguousarray(weights, dtype=np.float64)
    idx = np.arange(n, dtype=np.int64)
    assign = np.empty(n, dtype=np.int64)
    stack = [(0, n, 0, num_parts)]  # segment [start, end) of idx, first part id, parts in it
    while stack:
        start, end, first, k = stack.pop()
        if k == 1:
            assign[idx[start:end]] = first
            continue
        k_left = k // 2
        centre, scale, cov = segment_inertia(coords, _weights_or_unit(weights, idx[start:end]), idx, start, end)
        v = segment_projection(coords, centre, scale, _top_axis(cov), idx, start, end)
        n_left = bisect_range(v, idx, start, end, k_left, k, weights)
        stack.append((start + n_left, end, first + k_left, k - k_left))
        stack.append((start, start + n_left, first, k_left))
    return assign
