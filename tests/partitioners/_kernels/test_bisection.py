"""meshshard.partitioners._kernels.bisection: recursive bisection of the coarsest graph."""
import numpy as np
import pytest

from meshshard.partitioners._kernels import bisection as B
from meshshard.partitioners._kernels.csr import build_csr, cut_weight


def _grid(nx, ny, offset=0):
    """Edges of an nx x ny grid graph (4-neighbour), ids offset by ``offset``."""
    ids = np.arange(nx * ny).reshape(ny, nx) + offset
    right = np.stack([ids[:, :-1].ravel(), ids[:, 1:].ravel()])
    down = np.stack([ids[:-1].ravel(), ids[1:].ravel()])
    return np.concatenate([right, down], axis=1)


def _csr(edges, n):
    return build_csr(edges[0], edges[1], np.ones(edges.shape[1]), n)


@pytest.mark.parametrize("num_parts", [2, 3, 5, 7, 16])
def test_bisect_parts_balances_any_number_of_parts(num_parts):
    n = 30 * 20
    indptr, indices, data = _csr(_grid(30, 20), n)
    vw = np.ones(n)
    parts = B.bisect_parts(indptr, indices, data, vw, num_parts, 8, 0)
    sizes = np.bincount(parts, minlength=num_parts)
    assert parts.shape == (n,) and parts.min() == 0 and parts.max() == num_parts - 1 and sizes.min() > 0
    # each bisection within _BISECT_SLACK of its share (plus a node), compounded over the depths
    depth = int(np.ceil(np.log2(num_parts)))
    assert sizes.max() <= (1 + B._BISECT_SLACK) ** depth * n / num_parts + depth


def test_bisection_refines_the_grown_side():
    # a 30 x 20 grid halved: side 0 grown from the far corner has a long diagonal boundary; FM shortens it
    n = 30 * 20
    indptr, indices, data = _csr(_grid(30, 20), n)
    vw = np.ones(n)
    side, seen, queue = np.empty(n, np.int64), np.empty(n, np.bool_), np.empty(n, np.int64)
    corner = B._peripheral(indptr, indices, n, 0, seen, queue)
    B._grow_side(indptr, indices, vw, n, corner, n / 2, side, seen, queue, 0)
    grown = cut_weight(indptr, indices, data, side)
    assert (side == 0).sum() == n // 2 and grown >= 40  # a corner triangle of 300 nodes
    parts = B.bisect_parts(indptr, indices, data, vw, 2, 8, 0)
    assert np.bincount(parts).max() <= (1 + B._BISECT_SLACK) * n / 2
    assert cut_weight(indptr, indices, data, parts) < 0.85 * grown


def test_bisect_parts_balances_weight_not_count():
    n = 30 * 20
    indptr, indices, data = _csr(_grid(30, 20), n)
    vw = np.where(np.arange(n) % 30 < 10, 3.0, 1.0)  # the left third weighs as much as the rest
    parts = B.bisect_parts(indptr, indices, data, vw, 2, 8, 0)
    w = np.bincount(parts, weights=vw)
    assert w.max() <= (1 + B._BISECT_SLACK) * vw.sum() / 2 + vw.max()
    counts = np.bincount(parts)
    assert counts.min() < 0.45 * n  # by count it is far from even: the weights steer it


def test_bisect_parts_is_deterministic_per_salt_and_covers_separate_components():
    # two separate grids of different sizes: a search from one seed never reaches the other
    edges = np.concatenate([_grid(20, 10), _grid(10, 10, offset=200)], axis=1)
    n = 300
    indptr, indices, data = _csr(edges, n)
    vw = np.ones(n)
    a = B.bisect_parts(indptr, indices, data, vw, 4, 8, 5)
    assert np.array_equal(a, B.bisect_parts(indptr, indices, data, vw, 4, 8, 5))
    sizes = np.bincount(a, minlength=4)
    assert sizes.min() > 0 and sizes.max() <= (1 + B._BISECT_SLACK) ** 2 * n / 4 + 2


def test_bisect_parts_small_graphs():
    indptr, indices, data = _csr(_grid(3, 1), 3)  # a path of 3 nodes
    vw = np.ones(3)
    assert B.bisect_parts(indptr, indices, data, vw, 1, 4, 0).tolist() == [0, 0, 0]
    assert sorted(B.bisect_parts(indptr, indices, data, vw, 3, 4, 0).tolist()) == [0, 1, 2]  # a node per part
    two = B.bisect_parts(indptr, indices, data, vw, 2, 4, 0)
    assert sorted(np.bincount(two).tolist()) == [1, 2]
    few = B.bisect_parts(indptr, indices, data, vw, 5, 4, 0)  # more parts than nodes: distinct ids, no error
    assert len(set(few.tolist())) == 3 and few.max() < 5
    empty = np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    assert B.bisect_parts(*empty, np.zeros(0), 3, 4, 0).shape == (0,)


def test_fm_2way_lowers_the_cut_within_the_bounds():
    n = 16 * 16
    indptr, indices, data = _csr(_grid(16, 16), n)
    vw = np.ones(n)
    side = (np.arange(n) % 2).astype(np.int64)  # a checkerboard of columns: every horizontal edge is cut
    before = cut_weight(indptr, indices, data, side)
    cut = B._fm_2way(indptr, indices, data, vw, side, 132.0, 132.0, 1, 1, 2, 8, 0)
    assert cut == cut_weight(indptr, indices, data, side) < before
    assert np.bincount(side, minlength=2).max() <= 132
    # a side never drops below its minimum count
    side = np.zeros(n, dtype=np.int64)
    side[:3] = 1
    B._fm_2way(indptr, indices, data, vw, side, 1e9, 1e9, 1, 3, 2, 8, 0)
    assert (side == 1).sum() >= 3
