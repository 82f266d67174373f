"""meshshard.partitioners.multilevel: multilevel boundary refinement on real meshes."""
import numpy as np
import pytest
import torch

import meshshard as ms
from meshshard.partitioners import Partition, partition, partition_quality
from meshshard.partitioners.multilevel import _coarsen, greedy_refine, multilevel_refine, symmetric_adjacency
from tests.conftest import MESH_FILES
from tests.partitioners._meshes import partition_of


def _mesh(data_dir, name):
    mesh = ms.read_mesh(data_dir / name)
    return np.asarray(mesh.points), mesh.edge_index().numpy()


def _cut(assign, ei):
    return partition_quality(Partition(torch.from_numpy(assign), int(assign.max()) + 1), ei)


def test_symmetrisation_ignores_direction_duplicates_and_loops():
    ei = np.array([[0, 1, 2, 2, 3], [1, 2, 3, 2, 0]])
    both = np.concatenate([ei, ei[::-1], ei], axis=1)
    a, b = symmetric_adjacency(ei, 4), symmetric_adjacency(both, 4)
    assert (a != b).nnz == 0
    assert a.diagonal().sum() == 0 and (a != a.T).nnz == 0 and a.nnz == 8


def test_coarsening_keeps_parts_and_cut(data_dir):
    pts, ei = _mesh(data_dir, "rae2822_turb.su2")
    n = pts.shape[0]
    assign = partition(pts, 7, "hilbert", refine=False).assignment.numpy()
    adj = symmetric_adjacency(ei, n)
    cmap, cadj, cw, ca = _coarsen(adj, np.ones(n), assign, max_node_w=4.0, salt=0)
    assert cadj.shape[0] < 0.75 * n  # it really coarsens
    assert np.array_equal(ca[cmap], assign)  # every cluster inside one part
    assert cw.sum() == n and cw.max() <= 4.0
    # the cut weight of the coarse graph equals the fine edge cut
    coo = cadj.tocoo()
    coarse_cut = coo.data[ca[coo.row] != ca[coo.col]].sum() / 2
    assert coarse_cut == _cut(assign, ei)["edge_cut"]


@pytest.mark.parametrize("name", MESH_FILES)
@pytest.mark.parametrize("method", ["kdtree", "hilbert"])
def test_refinement_lowers_cut_within_bound(data_dir, name, method):
    pts, ei = _mesh(data_dir, name)
    plain = partition_of(data_dir, name, method, refine=False).assignment.numpy()
    refined = multilevel_refine(plain, 7, ei, imbalance=1.01)
    q0, q1 = _cut(plain, ei), _cut(refined, ei)
    metis = partition_quality(partition_of(data_dir, name, "graph"), ei)["edge_cut"]
    assert q1["edge_cut"] < q0["edge_cut"] or q0["edge_cut"] <= metis
    assert q1["edge_cut"] <= 1.3 * metis  # issue 2's target; measured 0.89-1.26x on the real meshes
    assert q1["imbalance"] <= 1.01 + 1e-12
    assert np.bincount(refined, minlength=7).min() > 0
    # what the front door returns, run after run (that call is cached for test_refine.py)
    assert np.array_equal(refined, partition_of(data_dir, name, method).assignment.numpy())


def test_weighted_bound_and_one_direction_edges(data_dir):
    pts, ei = _mesh(data_dir, "cylinder_crossflow_re35.vtu")
    n = pts.shape[0]
    w = 1.0 + (np.arange(n) % 5)
    plain = partition(pts, 5, "kdtree", weights=w, refine=False).assignment.numpy()
    one_dir = ei[:, ei[0] < ei[1]]
    a = multilevel_refine(plain, 5, one_dir, weights=w, imbalance=1.02)
    b = multilevel_refine(plain, 5, ei, weights=w, imbalance=1.02)
    assert np.array_equal(a, b)
    pw = np.bincount(a, weights=w, minlength=5)
    assert pw.max() / pw.mean() <= 1.02 + 1e-12
    assert _cut(a, ei)["edge_cut"] < _cut(plain, ei)["edge_cut"]


def test_greedy_refine_repairs_an_overweight_part(data_dir):
    pts, ei = _mesh(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    assign = partition(pts, 4, "kdtree", refine=False).assignment.numpy()
    heavy = np.flatnonzero(assign == 1)[:200]
    assign[heavy] = 0  # part 0 now ~15% above the mean
    adj = symmetric_adjacency(ei, n)
    out = greedy_refine(assign.copy(), 4, adj, np.ones(n), 1.01 * n / 4, max_rounds=200)
    assert np.bincount(out, minlength=4).max() <= 1.01 * n / 4


def test_trivial_inputs():
    ei = np.zeros((2, 0), dtype=np.int64)
    a = np.array([0, 1, 1, 0])
    assert np.array_equal(multilevel_refine(a, 2, ei), a)
    assert np.array_equal(multilevel_refine(np.zeros(4, dtype=np.int64), 1, np.array([[0], [1]])), np.zeros(4))
