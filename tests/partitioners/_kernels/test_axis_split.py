"""meshshard.partitioners._kernels.axis_split: recursive coordinate bisection against the numpy passes it replaced."""
import numpy as np
import pytest

from meshshard.partitioners.kdtree import rcb_assignment


def _rcb_numpy(points, num_parts):
    """The unweighted numpy recursive bisection the compiled passes replaced (extents in the points' dtype)."""
    n = points.shape[0]
    idx = np.arange(n)
    assign = np.empty(n, dtype=np.int64)
    stack = [(0, n, 0, num_parts)]
    while stack:
        start, end, first, k = stack.pop()
        if k == 1:
            assign[idx[start:end]] = first
            continue
        seg = idx[start:end]
        m, k_left = end - start, k // 2
        vals = [points[seg, j] for j in range(points.shape[1])]
        v = vals[int(np.argmax([float(x.max() * 0.5 - x.min() * 0.5) for x in vals]))]
        n_left = min(max(int(round(m * k_left / k)), k_left), m - (k - k_left))
        order = np.lexsort((seg, v))  # (value, id)
        left = np.zeros(m, dtype=bool)
        left[order[:n_left]] = True
        idx[start:end] = np.concatenate([seg[left], seg[~left]])
        stack.append((start + n_left, end, first + k_left, k - k_left))
        stack.append((start, start + n_left, first, k_left))
    return assign


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_rcb_equals_the_numpy_passes(dtype):
    rng = np.random.default_rng(3)
    clouds = [
        rng.random((5000, 3)),
        np.round(rng.random((3000, 2)) * 8) / 8,  # a coarse grid: many tied coordinates
        np.concatenate([rng.random((200, 3)) * [1e-7, 1.0, 1.0], rng.random((200, 3))]),
        np.stack(np.meshgrid(np.arange(13.0), np.arange(11.0), indexing="ij"), -1).reshape(-1, 2)[::-1].copy(),
    ]
    for pts in clouds:
        pts = pts.astype(dtype)
        for parts in (2, 3, 7, 16):
            assert np.array_equal(rcb_assignment(pts, parts), _rcb_numpy(pts, parts)), (pts.shape, parts)
