"""Compiled (numba) passes of recursive inertial bisection (``"inertial"``): a subdomain's inertia and its points'
positions along an axis.

One subdomain is a range ``idx[start:end]`` of node ids, as in recursive coordinate bisection
(:mod:`~meshshard.partitioners._kernels.axis_split`). Its points are first moved to the centre of their bounding box
and scaled into ``[-1, 1]`` (no overflow near 1e308, and no loss of the spread of a cloud far from the origin); the
weighted moments of those points are summed in one pass (their ``d x d`` covariance's top eigenvector is the principal
axis), where a principal component analysis of the ``[m, d]`` rows would copy them and decompose them.
"""
from __future__ import annotations

import numpy as np

from meshshard.partitioners._kernels.jit import njit

__all__ = ["segment_inertia", "segment_projection"]


@njit(cache=True, nogil=True)
def segment_inertia(coords, weights, idx, start, end):
    """The frame and the weighted covariance of the subdomain ``idx[start:end]`` -> ``(centre, scale, cov)``.

    Args:
        coords: float64 ``[N, d]`` coordinates (C order: a point's coordinates share a cache line).
        weights: float64 ``[N]`` non-negative node weights, or empty for unit weights (the caller passes empty
            weights when a subdomain's weights sum to zero).
        idx: int64 ``[N]`` node ids, subdomains as ranges.
        start, end: the subdomain's range of ``idx`` (at least one node).

    Returns:
        ``centre`` float64 ``[d]`` (of the bounding box), ``scale`` (the largest half-extent; 1 when the points
        coincide) and ``cov`` float64 ``[d, d]``: the weighted covariance of ``(x - centre) / scale``, over the total
        weight.
    """
    d = coords.shape[1]
    unit = weights.shape[0] == 0
    lo = coords[idx[start]].copy()
    hi = lo.copy()
    for i in range(start + 1, end):
        u = idx[i]
        for a in range(d):
            x = coords[u, a]
            lo[a] = min(lo[a], x)
            hi[a] = max(hi[a], x)
    centre = lo * 0.5 + hi * 0.5  # halves: no overflow near 1e308
    scale = 0.0
    for a in range(d):
        scale = max(scale, hi[a] * 0.5 - lo[a] * 0.5)
    if not scale > 0.0:
        scale = 1.0
    inv = 1.0 / scale
    # one pass sums the weight, the first and the second moments; in the box's frame every coordinate lies in
    # [-1, 1], so the covariance E[y y^T] - mean mean^T loses nothing that matters to the principal axis
    total = 0.0
    mean = np.zeros(d)
    cov = np.zeros((d, d))
    y = np.empty(d)
    for i in range(start, end):
        u = idx[i]
        w = 1.0 if unit else weights[u]
        total += w
        for a in range(d):
            y[a] = (coords[u, a] - centre[a]) * inv
            mean[a] += w * y[a]
        for a in range(d):
            for b in range(a, d):
                cov[a, b] += w * y[a] * y[b]
    if not total > 0.0:
        return centre, scale, np.zeros((d, d))
    mean /= total
    for a in range(d):
        for b in range(a, d):
            cov[a, b] = cov[a, b] / total - mean[a] * mean[b]
            cov[b, a] = cov[a, b]
    return centre, scale, cov


@njit(cache=True, nogil=True)
def segment_projection(coords, centre, scale, axis, idx, start, end):
    """Positions of the subdomain's points along ``axis`` in its frame (``(x - centre) / scale``), in ``idx`` order ->
    float64 ``[end - start]``: the values one cut of recursive inertial bisection orders by."""
    d = coords.shape[1]
    step = axis / scale
    v = np.empty(end - start)
    for i in range(start, end):
        u = idx[i]
        s = 0.0
        for a in range(d):
            s += (coords[u, a] - centre[a]) * step[a]
        v[i - start] = s
    return v
