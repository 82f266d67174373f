"""meshshard.partitioners._kernels.inertia: a subdomain's frame, weighted covariance and projection against numpy."""
import numpy as np
import pytest

from meshshard.partitioners._kernels.inertia import segment_inertia, segment_projection


def _reference(pts, w, ids):
    """Frame and weighted covariance of the points ``ids`` as the kernel defines them, in numpy (two passes)."""
    sub = pts[ids]
    lo, hi = sub.min(0), sub.max(0)
    centre = lo * 0.5 + hi * 0.5
    scale = float(np.max(hi * 0.5 - lo * 0.5))
    scale = scale if scale > 0 else 1.0
    y = (sub - centre) / scale
    w = np.ones(len(ids)) if w is None else w[ids]
    mean = w @ y / w.sum()
    return centre, scale, ((y - mean) * w[:, None]).T @ (y - mean) / w.sum()


@pytest.mark.parametrize("dim", [2, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_inertia_of_a_range_matches_numpy(dim, weighted):
    rng = np.random.default_rng(dim + 10 * weighted)
    pts = rng.normal(size=(5000, dim)) * [3.0, 1.0, 0.2][:dim] + 1e6  # far from the origin: the spread is kept
    w = rng.random(5000) * 4 if weighted else None
    idx = rng.permutation(5000).astype(np.int64)
    start, end = 1234, 4321
    centre, scale, cov = segment_inertia(pts, np.empty(0) if w is None else w, idx, start, end)
    want = _reference(pts, w, idx[start:end])
    assert np.allclose(centre, want[0], rtol=1e-15, atol=0) and scale == pytest.approx(want[1], rel=1e-15)
    assert np.allclose(cov, want[2], rtol=1e-9, atol=1e-15) and np.array_equal(cov, cov.T)
    axis = np.array([0.6, 0.8, 0.0][:dim])
    axis /= np.linalg.norm(axis)
    v = segment_projection(pts, centre, scale, axis, idx, start, end)
    assert v.shape == (end - start,)
    assert np.allclose(v, (pts[idx[start:end]] - centre) / scale @ axis, rtol=1e-12, atol=1e-15)


def test_inertia_without_spread_or_weight_and_near_the_largest_floats():
    idx = np.arange(4, dtype=np.int64)
    same = np.full((4, 3), 7.5)
    centre, scale, cov = segment_inertia(same, np.empty(0), idx, 0, 4)
    assert np.array_equal(centre, [7.5] * 3) and scale == 1.0 and not cov.any()
    pts = np.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0], [4.0, 0.0]])
    assert not segment_inertia(pts, np.zeros(4), idx, 0, 4)[2].any()  # no weight: no covariance
    # near 1e308: the frame's halves and the scale stay finite, and the long axis is still x
    huge = np.array([[-1.7e308, 0.0], [1.7e308, 1.0], [0.0, -1.0], [1e308, 0.5]])
    centre, scale, cov = segment_inertia(huge, np.empty(0), idx, 0, 4)
    assert np.isfinite(centre).all() and np.isfinite(scale) and np.isfinite(cov).all() and cov[0, 0] > cov[1, 1]
    assert np.isfinite(segment_projection(huge, centre, scale, np.array([1.0, 0.0]), idx, 0, 4)).all()
