"""The compiled cuts against the numpy passes they replaced and against brute force."""
import numpy as np
import pytest

from meshshard.partitioners import _cuts
from meshshard.partitioners._cuts import balanced_runs
from meshshard.partitioners.kdtree import rcb_assignment

from tests.partitioners.test_cuts import _brute_force


@pytest.mark.parametrize("weighted", [False, True])
def test_bucketed_runs_match_brute_force_at_small_sizes(weighted):
    # every size takes the compiled bucketed path now; small inputs with ties, crowded buckets and
    # minimum sizes that push a cut out of its bucket (the full-sort fallback) included
    rng = np.random.default_rng(11 + weighted)
    fell_back = 0
    for trial in range(60):
        n = int(rng.integers(3, 300))
        values = rng.integers(0, int(rng.choice([4, 64, 2**20])), size=n).astype(np.uint64)
        shift = int(rng.integers(0, 8))
        bucket = (values >> np.uint64(shift)).astype(np.int64)
        weights = rng.integers(0, 5, size=n).astype(np.float64) if weighted else None
        if weighted:
            weights[0] += 1.0
            if trial % 5 == 0:
                weights[int(rng.integers(n))] = 1e6  # one heavy item: the minimum sizes decide
        parts = int(rng.integers(2, min(n, 9) + 1))
        fractions = np.arange(1, parts) / parts
        run_min = np.ones(parts, dtype=np.int64)
        got = balanced_runs(values, weights, fractions, run_min, bucket, int(bucket.max()) + 1)
        assert np.array_equal(got, _brute_force(values.tolist(), weights, fractions, run_min)), trial
        total = weights.sum() if weighted else n
        fell_back += _cuts._bucketed(values, weights, fractions * total, run_min, bucket, int(bucket.max()) + 1) is None
    if weighted:
        assert fell_back > 0  # the fallback was exercised


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
