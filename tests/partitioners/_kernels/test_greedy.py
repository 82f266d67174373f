"""meshshard.partitioners._kernels.greedy: sweeps that take every move of positive gain."""
import numpy as np

from meshshard.partitioners._kernels.candidates import boundary_candidates
from meshshard.partitioners._kernels.csr import cut_weight
from meshshard.partitioners._kernels.greedy import greedy_refine
from tests.partitioners._meshes import grid_graph


def _graph(side):
    from meshshard.partitioners.multilevel import _csr

    ei, _ = grid_graph(side)
    return _csr(ei, side * side, None)


def test_a_node_with_more_edges_to_another_part_moves_there():
    # a 5x5 grid cut into left and right columns, with one node of the right part inside the left one:
    # all four of its edges lead left, so it moves
    indptr, indices, data = _graph(5)
    a = (np.arange(25) % 5 >= 3).astype(np.int32)
    a[2 * 5 + 1] = 1  # row 2, column 1: neighbours at columns 0 and 2 and rows 1 and 3, all in part 0
    before = cut_weight(indptr, indices, data, a)
    cands = boundary_candidates(indptr, indices, a)
    removed = greedy_refine(indptr, indices, data, np.ones(25), a, 2, 25.0, 4, *cands)
    assert a[2 * 5 + 1] == 0 and removed == 4.0 and cut_weight(indptr, indices, data, a) == before - 4.0


def test_greedy_sweeps_lower_the_cut_keep_the_bound_and_the_candidates():
    indptr, indices, data = _graph(30)
    n = 900
    rng = np.random.default_rng(3)
    for trial in range(6):
        # blocks with ragged borders: a part per 10x10 tile, a few nodes swapped at random
        tiles = ((np.arange(n) // 30) // 10) * 3 + (np.arange(n) % 30) // 10
        a = tiles.astype(np.int32)
        flip = rng.choice(n, 60, replace=False)
        a[flip] = rng.integers(0, 9, 60)
        vw = rng.integers(1, 3, n).astype(float)
        bound = float(np.bincount(a, weights=vw, minlength=9).max()) * (1.0 + 0.01 * trial)
        before = cut_weight(indptr, indices, data, a)
        listed, cand, count = boundary_candidates(indptr, indices, a)
        again = a.copy()
        removed = greedy_refine(indptr, indices, data, vw, a, 9, bound, 5, listed, cand, count)
        after = cut_weight(indptr, indices, data, a)
        assert removed > 0 and after == before - removed  # every move kept lowered (or kept) the cut
        loads = np.bincount(a, weights=vw, minlength=9)
        assert loads.max() <= bound and (np.bincount(a, minlength=9) > 0).all()
        boundary = np.flatnonzero([(a[indices[indptr[u]:indptr[u + 1]]] != a[u]).any() for u in range(n)])
        assert listed[boundary].all() and set(boundary) <= set(cand[:count[0]].tolist())  # still a superset
        # the same input gives the same parts
        greedy_refine(indptr, indices, data, vw, again, 9, bound, 5, *boundary_candidates(indptr, indices, again))
        assert np.array_equal(again, a)


def test_no_sweep_moves_nothing():
    indptr, indices, data = _graph(8)
    a = (np.arange(64) % 8 >= 4).astype(np.int32)
    a[10] = 1
    kept = a.copy()
    assert greedy_refine(indptr, indices, data, np.ones(64), a, 2, 64.0, 0, *boundary_candidates(indptr, indices, a)) == 0
    assert np.array_equal(a, kept)
