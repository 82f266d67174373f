import numpy as np
import pytest
import torch

from meshshard.partitioners import partition, partition_quality
from meshshard.partitioners._graph import symmetric_csr, undirected_pairs
from meshshard.partitioners.refine import refine_boundary
from tests.partitioners._meshes import MESH_FILES, load_drivaer, load_mesh


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["kdtree", "morton", "hilbert"])
def test_refinement_lowers_cut_keeps_bound(data_dir, name, method):
    pts, ei = load_mesh(data_dir, name)
    plain = partition(pts, 7, method, edge_index=ei, refine=False)
    assert plain == partition(pts, 7, method)  # refine=False ignores the graph
    ref = partition(pts, 7, method, edge_index=ei)
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


def test_refinement_never_raises_cut_and_respects_edge_weights():
    # a ring of 40 nodes split badly (alternating blocks); refinement only ever lowers the cut
    n = 40
    lo = np.arange(n)
    hi = (lo + 1) % n
    l, h, _ = undirected_pairs(np.stack([lo, hi]), n)
    indptr, indices, _ = symmetric_csr(l, h, None, n)
    start = (np.arange(n) // 3) % 2
    out = refine_boundary(start, indptr, indices, 2, imbalance=1.2)
    cut = lambda a: int((a[lo] != a[hi]).sum())  # noqa: E731
    assert cut(out) < cut(start)
    assert np.bincount(out, minlength=2).max() <= 1.2 * n / 2


def test_refinement_on_drivaer_knn(data_dir):
    pts, ei = load_drivaer(data_dir)
    plain = partition(pts, 7, "morton")
    ref = partition(torch.from_numpy(pts), 7, "morton", edge_index=ei)
    assert partition_quality(ref, ei)["edge_cut"] < partition_quality(plain, ei)["edge_cut"]
    assert partition_quality(ref, ei)["imbalance"] <= 1.01 + 1e-12
