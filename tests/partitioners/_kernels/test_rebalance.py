"""meshshard.partitioners._kernels.rebalance: moving excess out of overweight parts."""
import numpy as np

from meshshard.partitioners._kernels.candidates import boundary_candidates
from meshshard.partitioners._kernels.rebalance import rebalance


def test_rebalance_rebuilds_a_stale_part_adjacency():
    """A coarser level's part adjacency may show no route from an overweight part to room; rebalancing then
    rebuilds it from the graph instead of giving up (the old kernel returned False here)."""
    from meshshard.partitioners.multilevel import _csr

    n = 30  # a path 0-1-...-29: parts 0 (12 nodes, over), 1 (10, full), 2 (8, room), in a row
    ei = np.stack([np.arange(n - 1), np.arange(1, n)])
    indptr, indices, data = _csr(ei, n, None)
    assign = np.repeat([0, 1, 2], [12, 10, 8]).astype(np.int64)
    stale = (np.array([0, 1, 1, 2]), np.array([2, 0]))  # says 0 - 2 touch and 1 touches nothing
    ok = rebalance(indptr, indices, data, np.ones(n), assign, 3, 10.5, 0, -1,
                     *boundary_candidates(indptr, indices, assign), *stale)
    assert ok and np.bincount(assign, minlength=3).max() <= 10
    assert (np.diff(assign) >= 0).all()  # the excess went 0 -> 1 -> 2 along the path: parts stay runs
