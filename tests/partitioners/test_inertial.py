import numpy as np
import pytest
import torch

from meshshard.io import knn_graph
from meshshard.partitioners import InertialPartitioner, partition, partition_quality
from meshshard.partitioners.inertial import principal_axis, rib_assignment
from tests.partitioners._meshes import load_mesh


def _rotated_strip(angle_deg: float, dim: int = 2):
    """A 120 x 12 (x 4) grid of points turned by ``angle_deg`` about the z axis."""
    axes = [np.arange(120.0), np.arange(12.0)] + ([np.arange(4.0)] if dim == 3 else [])
    pts = np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], 1)
    th = np.deg2rad(angle_deg)
    rot = np.eye(dim)
    rot[:2, :2] = [[np.cos(th), -np.sin(th)], [np.sin(th), np.cos(th)]]
    return pts @ rot.T


@pytest.mark.parametrize("dim", [2, 3])
def test_inertial_cuts_a_rotated_strip_across_beats_kdtree(dim):
    pts = _rotated_strip(35.0, dim)
    ei = knn_graph(torch.from_numpy(pts), 6)
    for k in (2, 4, 8):  # cuts in 2D: 24 vs 42, 69 vs 117, 186 vs 340; 3D: 72 vs 96, ...
        rib = partition(pts, k, "inertial", refine=False)
        rcb = partition(pts, k, "kdtree", refine=False)
        assert max(rib.sizes) - min(rib.sizes) <= 1
        cut_rib, cut_rcb = partition_quality(rib, ei)["edge_cut"], partition_quality(rcb, ei)["edge_cut"]
        assert cut_rib < 0.8 * cut_rcb, (k, cut_rib, cut_rcb)
    # the parts are slabs across the long axis: the first cut is perpendicular to it
    long_axis = np.array([np.cos(np.deg2rad(35.0)), np.sin(np.deg2rad(35.0))] + [0.0] * (dim - 2))
    assert abs(abs(principal_axis(pts) @ long_axis) - 1.0) < 1e-9
    s = pts @ long_axis
    left = partition(pts, 2, "inertial").assignment.numpy() == 0
    assert s[left].max() <= s[~left].min() or s[~left].max() <= s[left].min()


def test_inertial_weighted_axis_and_balance():
    rng = np.random.default_rng(3)
    # a 3 x 1 cloud (unweighted axis: x) whose weight sits on a thin band along y: weighted axis y
    pts = rng.random((6000, 2)) * [3.0, 1.0]
    w = np.where(np.abs(pts[:, 0] - 1.5) < 0.05, 50.0, 0.01)
    assert abs(principal_axis(pts, w)[1]) > 0.99
    assert abs(principal_axis(pts)[0]) > 0.99
    for k in (3, 7):
        # balanced up to the weight of one node per cut
        pw = partition(pts, k, "inertial", weights=w).part_weights().numpy()
        assert pw.max() / pw.mean() <= 1 + k * w.max() / w.sum()
        mild = rng.random(6000) + 0.5
        part = partition(pts, k, "inertial", weights=mild)
        pw = part.part_weights().numpy()
        assert pw.max() / pw.mean() <= 1.01 and min(part.sizes) > 0
    # 7 parts split 3:4 by weight at the first cut
    a = rib_assignment(pts, 7, w)
    assert abs(w[a < 3].sum() / w.sum() - 3 / 7) <= w.max() / w.sum()


def test_inertial_deterministic_ties_by_id_and_any_k(data_dir):
    # a grid has many equal projections: ties go by global id, so a permuted input is the same
    # partition up to the permutation
    g = np.stack(np.meshgrid(np.arange(30.0), np.arange(30.0), indexing="ij"), -1).reshape(-1, 2)
    a = rib_assignment(g, 6)
    assert np.array_equal(a, rib_assignment(g.copy(), 6))
    assert np.bincount(a).tolist() == [150] * 6
    pts, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    for k in (1, 2, 7, 13):
        part = InertialPartitioner(refine=False).partition(pts, k)
        assert len(part.sizes) == k and max(part.sizes) - min(part.sizes) <= 1
    refined = partition(pts, 7, "inertial", edge_index=ei)
    plain = partition(pts, 7, "inertial", refine=False)
    assert partition_quality(refined, ei)["edge_cut"] <= partition_quality(plain, ei)["edge_cut"]
    assert partition_quality(refined, ei)["imbalance"] <= 1.01 + 1e-9


@pytest.mark.parametrize("bad, exc, msg", [
    (dict(points=np.array([[0.0, np.nan], [1.0, 1.0]]), num_parts=2), ValueError, "NaN"),
    (dict(points=np.zeros((4, 4)), num_parts=2), ValueError, r"\[N, 2\]"),
    (dict(points=np.zeros((4, 2)), num_parts=5), ValueError, "num_parts"),
    (dict(points=np.zeros((4, 2)), num_parts=2, weights=[1.0, -1.0, 1.0, 1.0]), ValueError, "negative"),
    (dict(points=np.zeros((4, 2)), num_parts=2, weights=[1.0, 1.0]), ValueError, "weights"),
])
def test_inertial_bad_input(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        partition(method="inertial", **bad)


def _rib_reference(pts, k, w=None):
    """Recursive inertial bisection in plain numpy: each subdomain in its box frame, cut across the top singular
    vector of its weighted centred rows (its largest entry positive), in (projection, id) order where the weight is
    nearest k_left / k."""
    assign = np.empty(len(pts), dtype=np.int64)
    stack = [(np.arange(len(pts)), 0, k)]
    while stack:
        ids, first, k = stack.pop()
        if k == 1:
            assign[ids] = first
            continue
        k_left = k // 2
        sub = pts[ids]
        centre = sub.min(0) * 0.5 + sub.max(0) * 0.5
        y = (sub - centre) / max(np.max(sub.max(0) * 0.5 - sub.min(0) * 0.5), 1e-300)
        ww = np.ones(len(ids)) if w is None else w[ids]
        rows = (y - ww @ y / ww.sum()) * np.sqrt(ww)[:, None]
        axis = np.linalg.svd(rows, full_matrices=False)[2][0]
        axis = axis if axis[np.argmax(np.abs(axis))] > 0 else -axis
        order = np.lexsort((ids, y @ axis))
        if w is None:
            n_left = int(round(len(ids) * k_left / k))
        else:
            cum = np.concatenate([[0.0], np.cumsum(ww[order])])
            n_left = int(np.argmin(np.abs(cum - cum[-1] * k_left / k)))
        n_left = min(max(n_left, k_left), len(ids) - (k - k_left))
        stack += [(np.sort(ids[order[n_left:]]), first + k_left, k - k_left), (np.sort(ids[order[:n_left]]), first, k_left)]
    return assign


@pytest.mark.parametrize("dim", [2, 3])
def test_rib_matches_a_numpy_reference(dim):
    # the compiled passes and the selection cut give the partition of the plain definition (random points: no two
    # projections within rounding of each other)
    rng = np.random.default_rng(dim)
    pts = rng.normal(size=(3000, dim)) @ rng.normal(size=(dim, dim)) + 5.0
    w = rng.integers(1, 5, 3000).astype(np.float64)
    for k in (2, 3, 7):
        for weights in (None, w):
            assert np.array_equal(rib_assignment(pts, k, weights), _rib_reference(pts, k, weights)), k
    axis = principal_axis(pts, w)
    ref = np.linalg.svd((pts - w @ pts / w.sum()) * np.sqrt(w)[:, None], full_matrices=False)[2][0]
    assert abs(abs(axis @ ref) - 1.0) < 1e-9 and axis[np.argmax(np.abs(axis))] > 0  # signed as PCA signs it
