"""meshshard.partitioners._kernels.runs: the compiled bucketed runs against brute force."""
import numpy as np
import pytest

from meshshard.partitioners import _runs
from meshshard.partitioners._runs import balanced_runs

from tests.partitioners.test_runs import _brute_force


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
        fell_back += _runs._bucketed(values, weights, fractions * total, run_min, bucket, int(bucket.max()) + 1) is None
    if weighted:
        assert fell_back > 0  # the fallback was exercised
