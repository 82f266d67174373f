import numpy as np
import pytest
import torch

from meshshard.partitioners import partition, partition_quality
from meshshard.partitioners.multilevel import multilevel_refine
from tests.partitioners._meshes import MESH_FILES, load_drivaer, load_mesh, partition_of


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["kdtree", "morton", "hilbert"])
def test_refinement_lowers_cut_keeps_bound(data_dir, name, method):
    pts, ei = load_mesh(data_dir, name)
    plain = partition_of(data_dir, name, method, refine=False)
    assert plain == partition(pts, 7, method)  # refine=False ignores the graph
    ref = partition_of(data_dir, name, method)
    q0, q1 = partition_quality(plain, ei), partition_quality(ref, ei)
    assert q1["edge_cut"] < q0["edge_cut"]
    assert q1["imbalance"] <= 1.01 + 1e-12
    assert min(ref.sizes) > 0


def test_refinement_weighted_and_custom_bound(data_dir):
    pts, ei = load_mesh(data_dir, "rae2822_turb.su2")
    w = 1.0 + np.random.default_rng(0).random(pts.shape[0])
    for imb in (1.001, 1.05):
        ref = partition(pts, 5, "hilbert", edge_index=ei, weights=w, imbalance=imb)
        q = partition_quality(ref, ei)
        assert q["imbalance"] <= max(imb, partition_quality(partition(pts, 5, "hilbert", weights=w), ei, w)["imbalance"]) + 1e-12
    a = partition_quality(partition(pts, 5, "hilbert", edge_index=ei, imbalance=1.05), ei)["edge_cut"]
    b = partition_quality(partition(pts, 5, "hilbert", edge_index=ei, imbalance=1.001), ei)["edge_cut"]
    assert a <= b  # a looser bound leaves more room for moves


def test_refinement_repairs_a_bad_ring_partition_and_respects_edge_weights():
    # a ring of 40 nodes split into alternating blocks of 3: refinement lowers the cut
    n = 40
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    start = (np.arange(n) // 3) % 2
    out = multilevel_refine(start, 2, ring, imbalance=1.2)
    cut = lambda a, w=None: float(((a[ring[0]] != a[ring[1]]) * (1 if w is None else w)).sum())  # noqa: E731
    assert cut(out) < cut(start)
    assert np.bincount(out, minlength=2).max() <= 1.2 * n / 2
    # with one very heavy edge, the refined partition does not cut it
    w = np.ones(n)
    w[7] = 1000.0
    out = multilevel_refine(start, 2, ring, edge_weights=w, imbalance=1.2)
    assert out[ring[0, 7]] == out[ring[1, 7]]
    assert cut(out, w) < cut(start, w)


def test_refinement_on_drivaer_knn(data_dir):
    pts, ei = load_drivaer(data_dir)
    plain = partition(pts, 7, "morton")
    ref = partition(torch.from_numpy(pts), 7, "morton", edge_index=ei)
    assert partition_quality(ref, ei)["edge_cut"] < partition_quality(plain, ei)["edge_cut"]
    assert partition_quality(ref, ei)["imbalance"] <= 1.01 + 1e-12
