"""meshshard.partitioners._runs.balanced_runs: bucketed cut == sort + prefix-weight cut."""
import numpy as np
import pytest

from meshshard.partitioners import _runs
from meshshard.partitioners._runs import balanced_runs
from meshshard.partitioners.sfc import hilbert_keys as hilbert_key


def _brute_force(values, weights, fractions, run_min):
    """Sort by (value, id) in Python, walk the prefix weights, pick the nearest prefix per target."""
    n = len(values)
    order = sorted(range(n), key=lambda i: (values[i], i))
    w = [1.0] * n if weights is None else [float(weights[i]) for i in order]
    prefix = [0.0]
    for x in w:
        prefix.append(prefix[-1] + x)
    pos = []
    for f in fractions:  # last prefix below the target vs first prefix reaching it; tie: below
        t = f * prefix[-1]
        below = max((j for j in range(n + 1) if prefix[j] < t), default=None)
        above = min(j for j in range(n + 1) if prefix[j] >= t)
        pos.append(below if below is not None and t - prefix[below] <= prefix[above] - t else above)
    lower = np.cumsum(run_min)[:-1]
    upper = n - np.cumsum(run_min[::-1])[::-1][1:]
    for j in range(len(pos)):  # push forward to honour minimum sizes, then clamp the tail
        pos[j] = min(max(pos[j], lower[j], (pos[j - 1] + run_min[j]) if j else lower[j]), upper[j])
    run = np.empty(n, dtype=np.int64)
    for r_pos, node in enumerate(order):
        run[node] = sum(p <= r_pos for p in pos)
    return run


@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_brute_force_small(weighted, distinct):
    rng = np.random.default_rng((3 if weighted else 4) + 10 * distinct)
    for trial in range(20):
        n = int(rng.integers(3, 40))
        if distinct:  # no ties: the unstable sort's order is used as it is
            values = rng.permutation(2 * n)[:n].astype(np.uint64) << np.uint64(40)
        else:
            values = rng.integers(0, 6, size=n).astype(np.uint64)  # many ties: broken by id
        weights = rng.integers(0, 5, size=n).astype(np.float64) if weighted else None
        if weighted and weights.sum() == 0:
            weights[0] = 1.0
        parts = int(rng.integers(2, min(n, 7) + 1))
        fractions = np.arange(1, parts) / parts
        run_min = np.ones(parts, dtype=np.int64)
        got = balanced_runs(values, weights, fractions, run_min)
        assert np.array_equal(got, _brute_force(values.tolist(), weights, fractions, run_min)), trial


@pytest.mark.parametrize("weighted", [False, True])
def test_bucketed_path_equals_full_sort(weighted, monkeypatch):
    rng = np.random.default_rng(7)
    n = 60_000
    values = (rng.integers(0, 2**20, size=n, dtype=np.uint64) << np.uint64(40)) | rng.integers(0, 4, size=n, dtype=np.uint64)
    values[:5000] = values[0]  # a crowded bucket and duplicate keys
    bucket = (values >> np.uint64(52)).view(np.int64)
    weights = rng.integers(0, 9, size=n).astype(np.float64) if weighted else None
    for parts in (2, 7, 33):
        fractions = np.arange(1, parts) / parts
        run_min = np.ones(parts, dtype=np.int64)
        fast = balanced_runs(values, weights, fractions, run_min, bucket, 1 << 12)
        full = balanced_runs(values, weights, fractions, run_min)
        assert np.array_equal(fast, full)
    # and the bucketed path really ran (did not fall back to the sort)
    assert _runs._bucketed(values, weights, fractions * (weights.sum() if weighted else n), run_min, bucket, 1 << 12) is not None


def test_minimum_sizes_hold_under_extreme_weights():
    n = 50_000
    values = np.arange(n, dtype=np.uint64)
    weights = np.ones(n)
    weights[-1] = 1e9  # one node outweighs all others: the fallback must keep every run non-empty
    bucket = (values >> np.uint64(4)).view(np.int64)
    run = balanced_runs(values, weights, np.arange(1, 7) / 7, np.ones(7, dtype=np.int64), bucket, int(bucket.max()) + 1)
    assert np.bincount(run, minlength=7).min() >= 1
    assert np.all(np.diff(run) >= 0)  # runs stay contiguous along the order


def test_uneven_split_for_rcb_style_minimums():
    run = balanced_runs(np.arange(14.0)[::-1].copy(), None, [3 / 7], [3, 4])  # 7 parts -> 3 : 4
    assert run.tolist() == [1] * 8 + [0] * 6  # the 6 smallest values go left
    # the weight alone would put 0 nodes left; 3 parts' worth needs >= 3 nodes there
    w = np.array([100.0, 1, 1, 1, 1, 1, 1])
    run = balanced_runs(np.arange(7.0), w, [3 / 7], [3, 4])
    assert np.bincount(run).tolist() == [3, 4]


def test_hilbert_runs_on_real_cloud_are_balanced(data_dir):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"]
    keys = hilbert_key(pts)
    bucket = (keys >> np.uint64(63 - 20)).view(np.int64)
    for parts in (2, 7, 16):
        run = balanced_runs(keys, None, np.arange(1, parts) / parts, np.ones(parts, dtype=np.int64), bucket, 1 << 20)
        sizes = np.bincount(run, minlength=parts)
        assert sizes.max() - sizes.min() <= 1
        # contiguous along the curve: sorting by key gives non-decreasing run ids
        assert np.all(np.diff(run[np.argsort(keys, kind="stable")]) >= 0)
    w = np.linalg.norm(pts - pts.mean(0), axis=1).astype(np.float64) + 0.1
    run = balanced_runs(keys, w, np.arange(1, 7) / 7, np.ones(7, dtype=np.int64), bucket, 1 << 20)
    pw = np.bincount(run, weights=w, minlength=7)
    assert pw.max() - pw.min() <= 2 * w.max()
