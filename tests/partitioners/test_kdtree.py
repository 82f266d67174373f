import numpy as np
import pytest
import torch

from meshshard.partitioners import KDTreePartitioner, partition, partition_quality
from meshshard.partitioners.kdtree import rcb_assignment
from tests.partitioners._meshes import MESH_FILES, load_drivaer, load_mesh


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("num_parts", [2, 7])
def test_kdtree_real_mesh_balanced(data_dir, name, num_parts):
    pts, ei = load_mesh(data_dir, name)
    part = partition(pts, num_parts, "kdtree")
    assert part.method == "kdtree" and part.num_nodes == pts.shape[0]
    # unweighted RCB splits counts exactly up to rounding at each of the ceil(log2 P) levels
    assert max(part.sizes) - min(part.sizes) <= 3
    assert min(part.sizes) > 0
    q = partition_quality(part, ei)
    assert q["imbalance"] <= 1.01


def test_kdtree_drivaer_cloud(data_dir):
    pts, _ = load_drivaer(data_dir)
    part = KDTreePartitioner().partition(torch.from_numpy(pts), 7)
    assert min(part.sizes) > 0 and max(part.sizes) - min(part.sizes) <= 3
    # parts are boxes: each part's bounding box overlaps others only on faces, so the part of a
    # point is decided by coordinates: check the first cut splits along the longest axis (x)
    a = part.assignment.numpy()
    left = np.isin(a, [0, 1, 2])  # 7 = 3 + 4: first cut sends parts 0..2 left
    ext = pts.max(0) - pts.min(0)
    ax = int(np.argmax(ext))
    assert pts[left, ax].max() <= pts[~left, ax].min()
    assert abs(left.sum() - round(pts.shape[0] * 3 / 7)) <= 1


def test_kdtree_seven_parts_split_three_four_by_weight():
    rng = np.random.default_rng(0)
    pts = rng.random((5000, 2)) * [10.0, 1.0]  # long in x: first cut is along x
    w = rng.random(5000) * 3
    a = rcb_assignment(pts, 7, w)
    left = a < 3
    assert pts[left, 0].max() <= pts[~left, 0].min()
    frac = w[left].sum() / w.sum()
    assert abs(frac - 3 / 7) <= w.max() / w.sum()
    pw = np.bincount(a, weights=w, minlength=7)
    assert pw.max() / pw.mean() < 1.01


def test_kdtree_weighted_heavy_region():
    # left half of the points ten times heavier: by weight, the parts covering it hold fewer points
    rng = np.random.default_rng(1)
    pts = rng.random((4000, 3))
    w = np.where(pts[:, 0] < 0.5, 10.0, 1.0)
    part = partition(pts, 4, "kdtree", weights=w)
    pw = part.part_weights().numpy()
    assert pw.max() / pw.mean() < 1.01
    assert part.sizes != [1000] * 4


def test_kdtree_every_part_count_nonempty():
    rng = np.random.default_rng(2)
    pts = rng.random((13, 3))
    for p in range(1, 14):
        a = rcb_assignment(pts, p)
        assert np.bincount(a, minlength=p).min() >= 1
    # duplicate points and zero weights still give non-empty parts
    pts = np.zeros((9, 2))
    w = np.zeros(9)
    w[0] = 1.0
    a = rcb_assignment(pts, 9, w)
    assert sorted(a.tolist()) == list(range(9))


@pytest.mark.parametrize("weighted", [False, True])
def test_kdtree_ties_go_by_global_id(weighted):
    # a grid holds many equal coordinates: the cut takes the tied points in increasing id, so the
    # result is a function of the input alone (partition_distributed reproduces it across ranks)
    rng = np.random.default_rng(5)
    g = np.stack(np.meshgrid(np.arange(9.0), np.arange(7.0), indexing="ij"), -1).reshape(-1, 2)
    pts = g[rng.permutation(g.shape[0])]
    w = rng.integers(1, 4, pts.shape[0]).astype(float) if weighted else None
    a = rcb_assignment(pts, 2, w)
    # reference: sort by (x, id) (x is the widest axis); cut at half the count, or at the weighted
    # prefix nearest half the weight (the shorter one on ties)
    order = np.lexsort((np.arange(pts.shape[0]), pts[:, 0]))
    if w is None:
        n_left = round(pts.shape[0] / 2)
    else:
        cum = np.cumsum(w[order])
        n_left = int(np.argmin(np.abs(cum - cum[-1] / 2))) + 1
    expect = np.ones(pts.shape[0], dtype=np.int64)
    expect[order[:n_left]] = 0
    assert np.array_equal(a, expect)
