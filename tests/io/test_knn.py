"""knn_graph against brute force on real points, exact ties, duplicates and bad input."""
import itertools

import numpy as np
import pytest
import torch

from meshshard.io import knn_graph


def _brute(points, k, loop):
    """Reference: sort every row of the full distance matrix by (distance, id)."""
    p = np.asarray(points, dtype=np.float64)
    d2 = ((p[:, None, :] - p[None, :, :]) ** 2).sum(-1)
    out = []
    for i in range(len(p)):
        order = np.lexsort((np.arange(len(p)), d2[i]))
        if not loop:
            order = order[order != i]
        out.append(order[:k])
    return np.array(out)


@pytest.fixture(scope="module")
def drivaer(data_dir):
    return np.load(data_dir / "drivaer_body_points.npz")["points"]


@pytest.mark.parametrize("loop", [False, True])
def test_matches_brute_force_distances_on_real_cloud(drivaer, loop):
    rng = np.random.default_rng(0)
    pts = drivaer[rng.choice(len(drivaer), 3000, replace=False)].astype(np.float64)
    k = 12
    ei = knn_graph(pts, k, loop=loop)
    assert ei.shape == (2, 3000 * k) and ei.dtype == torch.long
    assert torch.equal(ei[1], torch.arange(3000).repeat_interleave(k))
    nbr = ei[0].view(3000, k).numpy()
    ref = _brute(pts, k, loop)
    d_got = np.linalg.norm(pts[nbr] - pts[:, None], axis=-1)
    d_ref = np.linalg.norm(pts[ref] - pts[:, None], axis=-1)
    np.testing.assert_allclose(d_got, d_ref, rtol=0, atol=1e-12)
    # apart from floating-point near-ties, the neighbour ids agree exactly
    assert (nbr == ref).mean() > 0.999
    if not loop:
        assert not (nbr == np.arange(3000)[:, None]).any()
    else:
        assert (nbr[:, 0] == np.arange(3000)).all() or (d_got[:, 0] == 0).all()


def test_full_drivaer_cloud_shape_and_symmetry_free(drivaer):
    ei = knn_graph(drivaer, 6)
    n = len(drivaer)
    assert ei.shape == (2, 6 * n)
    assert (ei[0] != ei[1]).all()
    # per query no neighbour repeats
    nbr = ei[0].view(n, 6)
    assert (nbr.sort(1).values.diff(dim=1) != 0).all()


@pytest.mark.parametrize("loop", [False, True])
@pytest.mark.parametrize("k", [1, 4, 5, 8, 13])
def test_exact_ties_on_integer_grid_break_by_lower_id(k, loop):
    # on an integer grid many neighbours tie exactly at the k-th distance; shuffle ids so that
    # "lower id" is not the same as "first in memory"
    grid = np.array(list(itertools.product(range(6), range(5), range(3))), dtype=np.float64)
    perm = np.random.default_rng(1).permutation(len(grid))
    pts = grid[perm]
    ei = knn_graph(pts, k, loop=loop)
    assert np.array_equal(ei[0].view(len(pts), k).numpy(), _brute(pts, k, loop))
    assert torch.equal(knn_graph(torch.from_numpy(pts), k, loop=loop), ei)


@pytest.mark.parametrize("loop", [False, True])
def test_duplicate_points(loop):
    # 9 copies of one point, 4 copies of another, plus a few distinct points
    pts = np.array([[0.0, 0.0]] * 9 + [[5.0, 5.0]] * 4 + [[1.0, 0.0], [0.0, 2.0], [9.0, 9.0]])
    pts = pts[np.random.default_rng(2).permutation(len(pts))]
    for k in (1, 3, 8, 12, len(pts) - 1):
        ei = knn_graph(pts, k, loop=loop)
        assert np.array_equal(ei[0].view(len(pts), k).numpy(), _brute(pts, k, loop)), k
    all_same = np.zeros((6, 3))
    ei = knn_graph(all_same, 5)
    assert np.array_equal(ei[0].view(6, 5).numpy(), _brute(all_same, 5, False))


def test_bad_inputs():
    pts = np.random.default_rng(0).random((10, 3))
    for k in (0, -1, 10):
        with pytest.raises(ValueError, match="k must be in"):
            knn_graph(pts, k)
    assert knn_graph(pts, 10, loop=True).shape == (2, 100)
    with pytest.raises(ValueError):
        knn_graph(pts, 11, loop=True)
    with pytest.raises(TypeError):
        knn_graph(pts, 2.0)
    with pytest.raises(TypeError):
        knn_graph(pts, True)
    bad = pts.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="finite"):
        knn_graph(bad, 2)
    with pytest.raises(ValueError, match="shape"):
        knn_graph(np.zeros(5), 2)
    with pytest.raises(TypeError):
        knn_graph(np.array([["a"], ["b"]]), 1)


@pytest.mark.parametrize("exp", [-1060, -600, 600, 1000])
def test_extreme_magnitudes_give_the_same_graph(exp):
    # squared distances of such coordinates overflow (or underflow) float64; the graph must be
    # that of the same cloud at unit scale, never out-of-range ids or all-tied neighbours
    pts = np.random.default_rng(5).random((300, 3)) - 0.5
    ref = knn_graph(pts, 6)
    scaled = np.ldexp(pts, exp) if exp > -1000 else np.ldexp(pts, -1000) * 2.0**(exp + 1000)
    got = knn_graph(scaled, 6)
    assert int(got.max()) < 300
    if exp != -1060:  # subnormal coordinates lose bits: only the id range can be checked
        assert torch.equal(got, ref)
