"""meshshard.partitioners.graph_engines: METIS, KaMinPar and Mt-KaHyPar through partition(method="graph")."""
import numpy as np
import pytest
import torch

from meshshard.partitioners import GraphPartitioner, partition, partition_quality
from tests.partitioners._meshes import MESH_FILES, load_mesh


@pytest.mark.parametrize("name", MESH_FILES)
def test_graph_real_mesh(data_dir, name):
    pts, ei = load_mesh(data_dir, name)
    part = partition(pts, 7, "graph", edge_index=ei)
    assert part.method == "graph" and min(part.sizes) > 0
    q = partition_quality(part, ei)
    assert q["imbalance"] <= 1.011
    # METIS beats an unrefined space-filling-curve cut on every mesh
    assert q["edge_cut"] < partition_quality(partition(pts, 7, "morton"), ei)["edge_cut"]


def test_graph_one_direction_equals_both(data_dir):
    pts, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    one = ei[:, ei[0] < ei[1]]
    flipped = torch.stack([one[1], one[0]])
    a = partition(None, 5, "graph", edge_index=ei, num_nodes=pts.shape[0])
    b = partition(pts, 5, "graph", edge_index=one)
    c = partition(pts, 5, "graph", edge_index=torch.cat([flipped, one, one], 1))  # reversed + repeated
    assert a == b == c


def test_graph_seed_determinism_and_imbalance(data_dir):
    pts, ei = load_mesh(data_dir, "cylinder_laminar.su2")
    a = partition(pts, 6, "graph", edge_index=ei, seed=3)
    b = partition(pts, 6, "graph", edge_index=ei, seed=3)
    assert a == b
    loose = partition(pts, 6, "graph", edge_index=ei, imbalance=1.2)
    assert partition_quality(loose, ei)["imbalance"] <= 1.2 + 1e-9


def test_graph_isolated_nodes_tiny_and_trivial():
    # two triangles plus 4 isolated nodes
    ei = np.array([[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3]])
    part = partition(None, 2, "graph", edge_index=ei, num_nodes=10)
    assert min(part.sizes) > 0 and part.num_nodes == 10
    assert partition(None, 1, "graph", edge_index=ei, num_nodes=10).sizes == [10]
    assert partition(None, 10, "graph", edge_index=ei, num_nodes=10).sizes == [1] * 10
    # a graph with no edges at all, and one with only self loops
    for e in (np.zeros((2, 0), dtype=np.int64), np.array([[0, 1, 2], [0, 1, 2]])):
        p = partition(None, 3, "graph", edge_index=e, num_nodes=7)
        assert min(p.sizes) > 0
    # 2 nodes, 2 parts; 3 nodes, 2 parts
    assert sorted(partition(None, 2, "graph", edge_index=[[0], [1]], num_nodes=2).sizes) == [1, 1]
    assert sorted(partition(None, 2, "graph", edge_index=[[0, 1], [1, 2]], num_nodes=3).sizes) == [1, 2]


def test_graph_weights():
    # path 0-1-2-3 with a very heavy middle edge: a 2-way cut must avoid it
    ei = np.array([[0, 1, 2], [1, 2, 3]])
    part = GraphPartitioner(imbalance=1.5).partition(None, 2, ei, edge_weights=[1.0, 100.0, 1.0], num_nodes=4)
    a = part.assignment
    assert a[1] == a[2]
    # node weights: one node as heavy as the rest together ends up alone-ish
    n = 200
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    w = np.ones(n)
    w[:20] = 10.0
    part = partition(None, 4, "graph", edge_index=ring, weights=w, num_nodes=n, imbalance=1.05)
    pw = part.part_weights().numpy()
    assert pw.max() / pw.mean() <= 1.06
    assert part.sizes != [50] * 4


def test_graph_needs_edge_index(data_dir):
    pts, _ = load_mesh(data_dir, "naca0012_inviscid.su2")
    with pytest.raises(ValueError, match="edge_index"):
        partition(pts, 4, "graph")


def _checked_part_graph(monkeypatch):
    """Wrap pymetis.part_graph: record its arguments and assert the graph is well formed."""
    import pymetis

    real = pymetis.part_graph
    calls = []

    def spy(nparts, adjacency=None, **kwargs):
        xadj = np.asarray(adjacency.adj_starts)
        adj = np.asarray(adjacency.adjacent)
        n = xadj.size - 1
        rows = np.repeat(np.arange(n), np.diff(xadj))
        assert xadj[0] == 0 and (np.diff(xadj) >= 0).all() and xadj[-1] == adj.size
        assert adj.size == 0 or (adj.min() >= 0 and adj.max() < n)
        assert (rows != adj).all(), "self loop passed to METIS"
        keys = rows * n + adj
        assert np.unique(keys).size == keys.size, "repeated entry passed to METIS"
        assert np.array_equal(np.sort(keys), np.sort(adj * n + rows)), "directed graph passed to METIS"
        ew = kwargs.get("eweights")
        if ew is not None:
            ew = np.asarray(ew)
            assert ew.shape == adj.shape and (ew >= 1).all() and ew.dtype.kind == "i"
            w_of = dict(zip(keys.tolist(), ew.tolist()))
            assert all(w_of[int(a) * n + int(b)] == w for a, b, w in zip(rows, adj, ew)), "asymmetric weights"
        vw = kwargs.get("vweights")
        if vw is not None:
            vw = np.asarray(vw)
            assert vw.shape == (n,) and (vw >= 1).all() and vw.dtype.kind == "i"
        assert 2 <= nparts < n
        calls.append((nparts, kwargs))
        return real(nparts, adjacency, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    return calls


def test_metis_sees_only_symmetric_loop_free_graphs_and_gets_the_options(monkeypatch):
    calls = _checked_part_graph(monkeypatch)
    rng = np.random.default_rng(0)
    n = 60
    e = rng.integers(0, n, (2, 300))  # directed, repeated, self loops, isolated nodes likely
    e[:, :10] = np.arange(10)  # self loops
    ew = rng.random(300) * 5
    ew[::7] = 0.0  # zero-weight edges (METIS rejects them)
    w = rng.random(n)
    w[:5] = 0.0
    part = partition(None, 4, "graph", edge_index=e, weights=w, edge_weights=ew, num_nodes=n,
                     imbalance=1.07, seed=11)
    assert min(part.sizes) > 0
    (nparts, kwargs), = calls
    assert nparts == 4
    assert kwargs["options"].ufactor == 70 and kwargs["options"].seed == 11
    partition(None, 4, "graph", edge_index=e, num_nodes=n, imbalance=1.0)
    assert calls[-1][1]["options"].ufactor == 1
    # trivial part counts never reach METIS
    partition(None, 1, "graph", edge_index=e, num_nodes=n)
    partition(None, n, "graph", edge_index=e, num_nodes=n)
    assert len(calls) == 2


def test_graph_several_components(data_dir):
    # three disjoint copies of a real mesh plus isolated nodes: parts non-empty, balanced, and the
    # cut no worse than cutting each copy on its own would need
    _, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    n = int(ei.max()) + 1
    big = torch.cat([ei + i * n for i in range(3)], 1)
    part = partition(None, 6, "graph", edge_index=big, num_nodes=3 * n + 5)
    q = partition_quality(part, big)
    assert min(part.sizes) > 0 and q["imbalance"] <= 1.011
    alone = partition_quality(partition(None, 2, "graph", edge_index=ei, num_nodes=n), ei)["edge_cut"]
    assert q["edge_cut"] <= 3 * alone * 1.5


def test_graph_real_valued_weights_scale_without_overflow(monkeypatch):
    import meshshard.partitioners.graph_engines as G

    # a small limit stands in for a multi-million-node mesh: real weights must still fit
    w = np.random.default_rng(1).random(5000) + 0.5
    out = G._int_weights(w, "weights", limit=2**20)
    assert out.sum() <= 2**20 and (out >= 1).all()
    assert np.corrcoef(out, w)[0, 1] > 0.99
    # integer weights >= 1 pass unchanged; zeros and tiny weights become 1, ratios kept
    assert G._int_weights(np.array([1.0, 2.0, 7.0]), "w", 2**30).tolist() == [1, 2, 7]
    scaled = G._int_weights(np.array([0.0, 1.0, 2.0]), "w", 2**30)
    assert scaled[0] == 1 and scaled[2] == 2 * scaled[1] and scaled[2] >= 2**15
    # end to end with a tiny limit: METIS still balances the real weights
    monkeypatch.setattr(G, "_weight_limit", lambda: 2**20)
    ring = np.stack([np.arange(5000), (np.arange(5000) + 1) % 5000])
    part = partition(None, 4, "graph", edge_index=ring, weights=w, num_nodes=5000)
    pw = part.part_weights().numpy()
    assert pw.max() / pw.mean() <= 1.02


def test_graph_weight_heavier_than_a_part(capfd):
    # one node outweighs a fair part: it gets a part of its own, the others are balanced, and
    # METIS prints nothing ("too many parts" / "cannot bisect") on the console
    from meshshard.partitioners.graph_engines import _clip_heavy

    n = 400
    grid = np.arange(n).reshape(20, 20)
    ei = np.concatenate([np.stack([grid[:, :-1].ravel(), grid[:, 1:].ravel()]),
                         np.stack([grid[:-1].ravel(), grid[1:].ravel()])], 1)
    w = np.ones(n)
    w[210] = 1000.0
    part = partition(None, 5, "graph", edge_index=ei, weights=w, num_nodes=n)
    a = part.assignment.numpy()
    assert part.sizes[a[210]] <= 3  # (almost) alone
    rest = np.bincount(a[a != a[210]], minlength=5)
    rest = rest[rest > 0]
    assert rest.max() / rest.mean() <= 1.05
    out, err = capfd.readouterr()
    assert "***" not in out + err
    # the clipping itself
    assert _clip_heavy(np.array([1.0, 1, 1, 1]), 2).tolist() == [1, 1, 1, 1]
    assert _clip_heavy(np.array([10.0, 1, 1, 1, 1]), 3).tolist() == [2, 1, 1, 1, 1]
    assert _clip_heavy(np.array([9.0, 8, 0, 0]), 3).tolist() == [0, 0, 0, 0]


# ---- engines: KaMinPar and Mt-KaHyPar beside METIS ---------------------------------------------

ENGINES = ["metis", "kaminpar", "mtkahypar"]


@pytest.mark.parametrize("engine", ["kaminpar", "mtkahypar"])
def test_engine_real_mesh_balanced_sane_cut_deterministic(data_dir, engine):
    pts, ei = load_mesh(data_dir, "cylinder_crossflow_re35.vtu")
    n, k, imb = pts.shape[0], 7, 1.03
    part = partition(pts, k, "graph", edge_index=ei, engine=engine, imbalance=imb, seed=4)
    assert part.method == "graph" and part.num_nodes == n and min(part.sizes) > 0
    q = partition_quality(part, ei)
    # the engines bound a part by (1 + eps) * ceil(N / k)
    assert max(part.sizes) <= imb * -(-n // k)
    metis = partition_quality(partition(pts, k, "graph", edge_index=ei, imbalance=imb, seed=4), ei)
    assert q["edge_cut"] <= 1.5 * metis["edge_cut"]
    assert partition(pts, k, "graph", edge_index=ei, engine=engine, imbalance=imb, seed=4) == part
    assert GraphPartitioner(engine=engine, imbalance=imb, seed=4).partition(pts, k, ei) == part


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_weights_tiny_and_trivial(engine):
    # path 0-1-2-3 with a very heavy middle edge: a 2-way cut must avoid it
    ei = np.array([[0, 1, 2], [1, 2, 3]])
    part = GraphPartitioner(engine=engine, imbalance=1.5).partition(None, 2, ei, edge_weights=[1.0, 100.0, 1.0],
                                                                    num_nodes=4)
    assert part.assignment[1] == part.assignment[2] and min(part.sizes) > 0
    # node weights: 20 heavy nodes on a ring; balanced by weight, not by count
    n = 200
    ring = np.stack([np.arange(n), (np.arange(n) + 1) % n])
    w = np.ones(n)
    w[:20] = 10.0
    part = partition(None, 4, "graph", edge_index=ring, weights=w, num_nodes=n, imbalance=1.05, engine=engine)
    pw = part.part_weights().numpy()
    assert pw.max() / pw.mean() <= 1.06 and part.sizes != [50] * 4
    # zero node and edge weights, isolated nodes, one part, one node per part
    rng = np.random.default_rng(0)
    e = rng.integers(0, 60, (2, 300))
    ew = rng.random(300)
    ew[::7] = 0.0
    wz = rng.random(60)
    wz[:5] = 0.0
    part = partition(None, 4, "graph", edge_index=e, weights=wz, edge_weights=ew, num_nodes=60, engine=engine)
    assert min(part.sizes) > 0
    two_triangles = np.array([[0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3]])
    assert min(partition(None, 3, "graph", edge_index=two_triangles, num_nodes=10, engine=engine).sizes) > 0
    assert partition(None, 1, "graph", edge_index=two_triangles, num_nodes=10, engine=engine).sizes == [10]
    assert partition(None, 10, "graph", edge_index=two_triangles, num_nodes=10, engine=engine).sizes == [1] * 10
    for e in (np.zeros((2, 0), dtype=np.int64), np.array([[0, 1, 2], [0, 1, 2]])):  # no edges; self loops only
        assert sorted(partition(None, 3, "graph", edge_index=e, num_nodes=7, engine=engine).sizes) == [2, 2, 3]


@pytest.mark.parametrize("engine", ["kaminpar", "mtkahypar"])
def test_engine_missing_names_the_extra(monkeypatch, engine):
    import sys

    monkeypatch.setitem(sys.modules, engine, None)  # import raises ImportError
    with pytest.raises(ImportError, match=rf"pip install 'meshshard\[{engine}\]'"):
        partition(None, 2, "graph", edge_index=[[0, 1], [1, 2]], num_nodes=3, engine=engine)


def test_engine_bad_choice():
    with pytest.raises(ValueError, match="unknown graph engine 'chaco'.*kaminpar"):
        partition(None, 2, "graph", edge_index=[[0], [1]], num_nodes=2, engine="chaco")
    with pytest.raises(ValueError, match="unknown graph engine"):
        GraphPartitioner(engine=None)
    with pytest.raises(ValueError, match="engine='kaminpar' applies to method='graph' only"):
        partition(np.zeros((4, 2)), 2, "kdtree", engine="kaminpar")


def test_metis_gets_a_mesh_edge_index_without_copies(data_dir, monkeypatch):
    import pymetis

    pts, ei = load_mesh(data_dir, "naca0012_inviscid.su2")
    seen = []
    real = pymetis.part_graph

    def spy(nparts, adjacency=None, **kwargs):
        seen.append(np.shares_memory(np.asarray(adjacency.adjacent), ei.numpy()))
        return real(nparts, adjacency, **kwargs)

    monkeypatch.setattr(pymetis, "part_graph", spy)
    part = partition(pts, 4, "graph", edge_index=ei)
    assert seen == [True]
    shuffled = ei[:, torch.randperm(ei.shape[1], generator=torch.Generator().manual_seed(0))]
    assert partition(pts, 4, "graph", edge_index=shuffled) == part and seen == [True, False]
