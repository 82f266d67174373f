import numpy as np
import pytest
import torch

import meshshard.partitioners as P
from meshshard.partitioners import (
    GraphPartitioner,
    HilbertPartitioner,
    KDTreePartitioner,
    MortonPartitioner,
    Partition,
    partition,
    partition_quality,
)
from tests.partitioners._meshes import load_mesh

METHODS = ["kdtree", "morton", "hilbert", "graph"]


def test_exports():
    assert set(P.__all__) == {"Partition", "partition", "partition_quality", "KDTreePartitioner",
                              "MortonPartitioner", "HilbertPartitioner", "GraphPartitioner"}
    import meshshard as ms

    assert ms.partition is partition and ms.partition_quality is partition_quality


@pytest.mark.parametrize("method", METHODS)
def test_front_door_determinism_torch_numpy_save_load(data_dir, tmp_path, method):
    pts, ei = load_mesh(data_dir, "brick_tets.su2")
    w = np.random.default_rng(0).random(pts.shape[0]) + 0.5
    a = partition(pts, 7, method, edge_index=ei, weights=w, seed=1)
    b = partition(torch.from_numpy(pts).float(), 7, method, edge_index=ei.numpy(), weights=torch.from_numpy(w), seed=1)
    c = partition(pts, 7, method, edge_index=ei, weights=w, seed=1)
    assert a.method == method and a == c
    if method == "graph":
        assert a == b  # only the graph matters
    assert min(a.sizes) > 0 and sum(a.sizes) == pts.shape[0]
    a.save(tmp_path / "p.pt")
    back = Partition.load(tmp_path / "p.pt")
    assert back == a and back.method == method
    assert torch.equal(back.node_weights, torch.from_numpy(w))
    assert partition_quality(back, ei) == partition_quality(a, ei)


def test_classes_equal_front_door(data_dir):
    pts, ei = load_mesh(data_dir, "cylinder_crossflow_re35.vtu")
    for cls, m in ((KDTreePartitioner, "kdtree"), (MortonPartitioner, "morton"), (HilbertPartitioner, "hilbert")):
        assert cls(seed=2).partition(pts, 3, ei) == partition(pts, 3, m, edge_index=ei, seed=2)
        assert cls(refine=False).partition(pts, 3, ei) == partition(pts, 3, m)
    assert GraphPartitioner(imbalance=1.03).partition(pts, 3, ei) == partition(pts, 3, "graph", edge_index=ei, imbalance=1.03)


@pytest.mark.parametrize("method", ["kdtree", "morton", "hilbert"])
def test_small_and_degenerate_inputs(method):
    assert partition(np.zeros((1, 3)), 1, method).sizes == [1]
    assert sorted(partition(np.zeros((5, 2)), 5, method).sizes) == [1] * 5  # coincident points
    line = np.stack([np.arange(9.0), np.zeros(9)], 1)
    assert sorted(partition(line, 4, method).sizes) == [2, 2, 2, 3]
    assert partition(line, 4, method, edge_index=[[0, 1], [1, 2]]).num_nodes == 9


def _pts():
    return np.random.default_rng(0).random((20, 3))


@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        (dict(points=np.array([[0.0, np.nan, 0.0]] * 3)), ValueError, "NaN or inf"),
        (dict(points=np.array([[0.0, np.inf]] * 3)), ValueError, "NaN or inf"),
        (dict(points=np.zeros((5, 4))), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.zeros(5)), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.array([["a", "b"]])), TypeError, "real numbers"),
        (dict(num_parts=0), ValueError, "num_parts must be >= 1"),
        (dict(num_parts=21), ValueError, "must not exceed"),
        (dict(num_parts=2.0), TypeError, "num_parts must be an int"),
        (dict(weights=np.ones(19)), ValueError, "weights must have shape"),
        (dict(weights=-np.ones(20)), ValueError, "non-negative"),
        (dict(weights=np.zeros(20)), ValueError, "sum to zero"),
        (dict(weights=np.full(20, np.nan)), ValueError, "NaN"),
        (dict(edge_index=np.array([[0, 1], [1, 20]])), ValueError, "out of range"),
        (dict(edge_index=np.array([[0, -1], [1, 2]])), ValueError, "negative"),
        (dict(edge_index=np.array([[0, 1, 2]])), ValueError, r"\[2, E\]"),
        (dict(edge_index=np.array([[0.0], [1.0]])), TypeError, "integer"),
        (dict(edge_index=np.array([[0, 1], [1, 2]]), edge_weights=np.ones(3)), ValueError, "edge_weights"),
        (dict(edge_index=np.array([[0, 1], [1, 2]]), edge_weights=-np.ones(2)), ValueError, "non-negative"),
        (dict(method="metis"), ValueError, "valid methods"),
        (dict(imbalance=0.9), ValueError, "imbalance"),
    ],
)
def test_bad_input(kwargs, exc, msg):
    args = dict(points=_pts(), num_parts=3, method="kdtree")
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        partition(args.pop("points"), args.pop("num_parts"), args.pop("method"), **args)
    if "method" not in kwargs and "points" in kwargs or "num_parts" in kwargs:
        for method in ("morton", "hilbert"):
            with pytest.raises(exc, match=msg):
                a = dict(points=_pts(), num_parts=3)
                a.update(kwargs)
                partition(a.pop("points"), a.pop("num_parts"), method, **a)


def test_bad_input_graph():
    ei = np.array([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="out of range"):
        partition(_pts()[:2], 2, "graph", edge_index=ei)
    with pytest.raises(ValueError, match="must not exceed"):
        partition(None, 4, "graph", edge_index=ei)
    with pytest.raises(ValueError, match="weights must have shape"):
        partition(_pts(), 2, "graph", edge_index=ei, weights=np.ones(3))
