"""meshshard.partitioners.registry: partition() and the partitioner classes on every method."""
import numpy as np
import pytest
import torch

import meshshard.partitioners as P
from meshshard.partitioners import (
    GraphPartitioner,
    HilbertPartitioner,
    InertialPartitioner,
    KDTreePartitioner,
    MortonPartitioner,
    Partition,
    partition,
    partition_quality,
)
from tests.partitioners._meshes import load_mesh

METHODS = ["kdtree", "inertial", "morton", "hilbert", "graph"]


def test_exports():
    assert set(P.__all__) == {"Partition", "partition", "partition_quality", "KDTreePartitioner",
                              "InertialPartitioner", "MortonPartitioner", "HilbertPartitioner", "GraphPartitioner"}
    import meshshard as ms

    assert ms.partition is partition and ms.partition_quality is partition_quality


@pytest.mark.parametrize("method", METHODS)
def test_front_door_determinism_torch_numpy_save_load(data_dir, tmp_path, method):
    pts, ei = load_mesh(data_dir, "brick_tets.su2")
    w = np.random.default_rng(0).random(pts.shape[0]) + 0.5
    a = partition(pts, 7, method, edge_index=ei, weights=w, seed=1)
    b = partition(torch.from_numpy(pts).float(), 7, method, edge_index=ei.numpy(), weights=torch.from_numpy(w), seed=1)
    # the same input (here as a torch tensor) gives the same partition; float32 gives a valid one
    assert a.method == method
    assert partition(torch.from_numpy(pts), 7, method, edge_index=ei, weights=torch.from_numpy(w), seed=1) == a
    assert b.num_nodes == pts.shape[0] and min(b.sizes) > 0
    if method == "graph":
        assert a == b  # only the graph matters
    else:
        assert partition_quality(b, ei, w)["imbalance"] <= 1.01 + 1e-9
    assert min(a.sizes) > 0 and sum(a.sizes) == pts.shape[0]
    a.save(tmp_path / "p.pt")
    back = Partition.load(tmp_path / "p.pt")
    assert back == a and back.method == method
    assert torch.equal(back.node_weights, torch.from_numpy(w))
    assert partition_quality(back, ei) == partition_quality(a, ei)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", ["brick_tets.su2", "cylinder_crossflow_re35.vtu"])
def test_int32_edge_index_gives_the_same_partition(data_dir, method, name):
    """int32 ids (preprocess keeps its edges so) are read as they are, not copied to int64: the same partitions,
    quality figures and components, with the mesh's CSR-ordered edges and with a shuffled edge list."""
    from meshshard.partitioners._validate import as_edge_index
    from meshshard.partitioners.multilevel import part_components

    pts, ei = load_mesh(data_dir, name)
    shuffled = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))]
    for e64 in (ei, shuffled):
        e32 = e64.to(torch.int32)
        assert as_edge_index(e32, pts.shape[0]).dtype == np.int32
        assert np.shares_memory(as_edge_index(e32, pts.shape[0]), e32.numpy())
        a = partition(pts, 5, method, edge_index=e64, seed=3)
        b = partition(pts, 5, method, edge_index=e32, seed=3)
        assert a == b
        assert partition_quality(a, e64) == partition_quality(b, e32)
        assert np.array_equal(part_components(a.assignment.numpy(), e64.numpy(), 5),
                              part_components(a.assignment.numpy(), e32.numpy(), 5))


def test_classes_equal_front_door(data_dir):
    pts, ei = load_mesh(data_dir, "cylinder_crossflow_re35.vtu")
    for cls, m in ((KDTreePartitioner, "kdtree"), (InertialPartitioner, "inertial"), (MortonPartitioner, "morton"),
                   (HilbertPartitioner, "hilbert")):
        assert cls(seed=2).partition(pts, 3, ei) == partition(pts, 3, m, edge_index=ei, seed=2)
        assert cls(refine=False).partition(pts, 3, ei) == partition(pts, 3, m)
    assert GraphPartitioner(imbalance=1.03).partition(pts, 3, ei) == partition(pts, 3, "graph", edge_index=ei, imbalance=1.03)


@pytest.mark.parametrize("method", ["kdtree", "inertial", "morton", "hilbert"])
def test_small_and_degenerate_inputs(method):
    assert partition(np.zeros((1, 3)), 1, method).sizes == [1]
    assert sorted(partition(np.zeros((5, 2)), 5, method).sizes) == [1] * 5  # coincident points
    line = np.stack([np.arange(9.0), np.zeros(9)], 1)
    assert sorted(partition(line, 4, method).sizes) == [2, 2, 2, 3]
    assert partition(line, 4, method, edge_index=[[0, 1], [1, 2]]).num_nodes == 9


def _pts():
    return np.random.default_rng(0).random((20, 3))


_RING20 = np.stack([np.arange(20), (np.arange(20) + 1) % 20])


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(
    "kwargs,exc,msg",
    [
        (dict(points=np.array([[0.0, np.nan, 0.0]] * 3)), ValueError, "NaN or inf"),
        (dict(points=np.array([[0.0, np.inf]] * 3)), ValueError, "NaN or inf"),
        (dict(points=torch.tensor([[0.0, -float("inf"), 1.0]] * 3)), ValueError, "NaN or inf"),
        (dict(points=np.zeros((5, 4))), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.zeros((5, 1))), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.zeros(5)), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.zeros((2, 5, 3))), ValueError, r"\[N, 2\] or \[N, 3\]"),
        (dict(points=np.array([["a", "b"]])), TypeError, "real numbers"),
        (dict(num_parts=0), ValueError, "num_parts must be >= 1"),
        (dict(num_parts=-2), ValueError, "num_parts must be >= 1"),
        (dict(num_parts=21), ValueError, "must not exceed"),
        (dict(num_parts=2.0), TypeError, "num_parts must be an int"),
        (dict(weights=np.ones(19)), ValueError, "weights must have shape"),
        (dict(weights=np.ones(21)), ValueError, "weights must have shape"),
        (dict(weights=-np.ones(20)), ValueError, "non-negative"),
        (dict(weights=np.r_[np.ones(19), -1e-9]), ValueError, "non-negative"),
        (dict(weights=np.zeros(20)), ValueError, "sum to zero"),
        (dict(weights=np.full(20, np.nan)), ValueError, "NaN"),
        (dict(edge_index=np.array([[0, 1], [1, 20]])), ValueError, "out of range"),
        (dict(edge_index=torch.tensor([[0, 1], [1, 20]])), ValueError, "out of range"),
        (dict(edge_index=np.array([[0, -1], [1, 2]])), ValueError, "negative"),
        (dict(edge_index=np.array([[0, 1, 2]])), ValueError, r"\[2, E\]"),
        (dict(edge_index=np.array([[0.0], [1.0]])), TypeError, "integer"),
        (dict(edge_index=np.array([[0, 1], [1, 2]]), edge_weights=np.ones(3)), ValueError, "edge_weights"),
        (dict(edge_index=np.array([[0, 1], [1, 2]]), edge_weights=-np.ones(2)), ValueError, "non-negative"),
        (dict(imbalance=0.9), ValueError, "imbalance"),
        (dict(imbalance=float("nan")), ValueError, "imbalance"),
    ],
)
def test_bad_input(method, kwargs, exc, msg):
    # every method rejects every bad input with a message that names the problem
    args = dict(points=_pts(), num_parts=3, edge_index=_RING20 if method == "graph" else None)
    args.update(kwargs)
    with pytest.raises(exc, match=msg):
        partition(args.pop("points"), args.pop("num_parts"), method, **args)


@pytest.mark.parametrize("bad", ["metis", "KDTREE", "", None, 3])
def test_unknown_method(bad):
    with pytest.raises(ValueError, match="valid methods"):
        partition(_pts(), 3, bad)


def test_bad_input_graph():
    ei = np.array([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="out of range"):
        partition(_pts()[:2], 2, "graph", edge_index=ei)
    with pytest.raises(ValueError, match="must not exceed"):
        partition(None, 4, "graph", edge_index=ei)
    with pytest.raises(ValueError, match="weights must have shape"):
        partition(_pts(), 2, "graph", edge_index=ei, weights=np.ones(3))


def _knn(points, k=4):
    import meshshard as ms

    return ms.knn_graph(points, k)


def _degenerate_clouds():
    rng = np.random.default_rng(4)
    t = rng.random(600)
    plane_uv = rng.random((600, 2))
    return {
        "identical": np.full((600, 3), 2.5),
        "identical_2d": np.full((600, 2), -1.0),
        "line_in_3d": np.outer(t, [1.0, -2.0, 0.5]) + [3.0, 1.0, -7.0],
        "plane_in_3d": plane_uv @ np.array([[1.0, 0.0, 0.3], [0.0, 1.0, -0.2]]),
        "two_points_repeated": np.repeat([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], 300, axis=0),
        "far_from_origin": rng.random((600, 3)) * 1e-3 + [1e9, -1e9, 5e8],
        "huge_extent": np.ldexp(np.r_[[[-1.0, -1.0], [1.0, 1.0]], rng.random((598, 2)) * 2 - 1], 1023),
        "tiny_extent": rng.random((600, 2)) * 1e-310,
    }


@pytest.mark.filterwarnings("error")  # no overflow / invalid-cast RuntimeWarning either
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("cloud", list(_degenerate_clouds()))
def test_degenerate_clouds_every_method(method, cloud):
    # duplicate / collinear / coplanar points, extreme magnitudes: balanced, non-empty, deterministic
    pts = _degenerate_clouds()[cloud]
    ei = _knn(pts)
    assert int(ei.max()) < pts.shape[0]
    assert partition(pts, 1, method, edge_index=ei).sizes == [600]
    for p in (7, 64):
        part = partition(pts, p, method, edge_index=ei)
        assert part.num_nodes == 600 and len(part.sizes) == p and min(part.sizes) > 0
        imb = partition_quality(part, ei)["imbalance"]
        if method != "graph":  # the refinement keeps the bound (or counts differ by one node)
            assert imb <= 1.01 + 1e-9 or max(part.sizes) - min(part.sizes) <= 1
        elif p < 64:  # METIS treats ufactor as a target, not a guarantee, on tiny graphs
            assert imb <= 1.05
        assert partition(pts, p, method, edge_index=ei) == part
    if method != "graph":
        plain = partition(pts, 7, method)
        assert max(plain.sizes) - min(plain.sizes) <= 1  # unweighted: counts split evenly
        w = np.linspace(1.0, 3.0, 600)
        pw = partition(pts, 7, method, weights=w).part_weights().numpy()
        assert pw.max() / pw.mean() <= 1 + 7 * w.max() / w.sum()


@pytest.mark.parametrize("method", METHODS)
def test_edge_cases_every_method(method):
    rng = np.random.default_rng(9)
    pts = rng.random((50, 3))
    ei = _knn(pts)
    empty = np.zeros((2, 0), dtype=np.int64)
    # empty edge_index: geometric methods ignore it, METIS gets a graph of isolated nodes
    part = partition(pts, 4, method, edge_index=empty)
    assert min(part.sizes) > 0 and sum(part.sizes) == 50
    if method != "graph":
        assert part == partition(pts, 4, method)
    # one part, and as many parts as nodes
    assert partition(pts, 1, method, edge_index=ei).sizes == [50]
    assert sorted(partition(pts, 50, method, edge_index=ei).assignment.tolist()) == list(range(50))
    # numpy / torch / float32 / integer coordinates and int32 edge ids
    ref = partition(pts, 5, method, edge_index=ei)
    assert partition(torch.from_numpy(pts), 5, method, edge_index=ei.int()) == ref
    assert partition(pts.tolist(), 5, method, edge_index=ei.numpy()) == ref
    p32 = partition(pts.astype(np.float32), 5, method, edge_index=ei)
    assert min(p32.sizes) > 0
    grid = np.argwhere(np.ones((5, 5, 2), bool))  # int64 coordinates
    assert min(partition(grid, 5, method, edge_index=_knn(grid.astype(float))).sizes) > 0
    # a 2D cloud, and node weights given as a tensor of ints
    pts2 = rng.random((80, 2))
    w = torch.randint(1, 4, (80,))
    part = partition(pts2, 3, method, edge_index=_knn(pts2), weights=w)
    assert part.part_weights().sum().item() == pytest.approx(float(w.sum()))
