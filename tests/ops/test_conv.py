"""ShardedConv on 1-4 gloo ranks equals the PyG layer on the whole graph: owned outputs, input
gradients (nodes, edge features, edge weights) and parameter gradients, in both modes
(exchange per layer; one exchange with a k-hop halo, with and without ``layers_left``).

Coverage (every case runs at every world size 1-4, all three modes):

* layers: GCNConv (plain, improved + edge weights), SAGEConv (mean, max), GATConv (edge features),
  EdgeConv (max, mean), the MeshGraphNet block (edge update + edge features), LGConv
  (gcn_norm without parameters), TAGConv K=2 (a 2-hop layer: exchange mode must refuse it);
* float64 (1e-10) for every layer, float32 (1e-5) for GCN, SAGE, GAT, EdgeConv and MeshGraphNet;
* graphs: the NACA 0012 mesh (2-D, symmetric), a directed kNN graph on its points (in-degree !=
  out-degree), and the brick tetrahedral mesh (3-D; float64 only: its float32 parameter gradients
  sum ~1e5 edge terms, whose rounding alone is ~1e-4 relative, whatever the summation order);
* partition methods: case ``c`` at world size ``W`` uses ``METHODS[(c + W) % 4]``, so over the
  multi-rank sizes 2, 3, 4 each case meets three of the four methods and every method meets every
  layer kind at some ``W > 1`` (asserted in :func:`test_coverage_of_methods`);
* an empty rank (a part with no owned nodes) at ``W >= 2``, ShardTensor input, and bad input;
* at ``W = 3``, values of ten more PyG layers in halo mode (:func:`_zoo`: GraphConv, GINEConv,
  GATv2Conv, TransformerConv, GENConv, PNAConv, ClusterGCNConv, APPNP K=3, SGConv K=3, MixHopConv).
"""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.graph.graph_data import METHODS, knn_edges, load_graph, make_partition

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 300
F, D = 8, 3
# (layer kind, graph, dtype)
CASES = [
    ("gcn", "mesh", torch.float64),
    ("gcn", "knn", torch.float64),  # directed: in-degree != out-degree
    ("gcn_weighted", "knn", torch.float64),
    ("sage", "mesh", torch.float64),
    ("gat", "mesh", torch.float64),
    ("edgeconv", "knn", torch.float64),
    ("mgn", "mesh", torch.float64),
    ("gcn", "mesh", torch.float32),
    ("mgn", "knn", torch.float32),
    ("lg", "knn", torch.float64),
    ("tag", "mesh", torch.float64),
    ("sage", "brick", torch.float64),
    ("sage", "knn", torch.float32),
    ("gat", "knn", torch.float32),
    ("edgeconv", "mesh", torch.float32),
    ("mgn", "brick", torch.float64),
]
# Hops of graph distance each of the two layers reaches (TAGConv with K=2 propagates twice).
LAYER_HOPS = {"tag": [2, 1]}


def _case_method(case_no: int, world: int) -> str:
    return METHODS[(case_no + world) % len(METHODS)]


def test_coverage_of_methods():
    """Every layer kind meets every partition method at some world size > 1, and every kind both dtypes
    where the docstring says so (guards the coverage claim against edits of CASES)."""
    kinds = {k for k, _, _ in CASES}
    for kind in kinds:
        met = {_case_method(c, w) for c, (k, _, _) in enumerate(CASES) if k == kind for w in (2, 3, 4)}
        if sum(k == kind for k, _, _ in CASES) >= 2:
            assert met == set(METHODS), (kind, met)
        else:
            assert len(met) == 3, (kind, met)
    assert {k for k, _, d in CASES if d == torch.float32} >= {"gcn", "sage", "gat", "edgeconv", "mgn"}
    assert {k for k, _, d in CASES if d == torch.float64} == kinds


def _make_layers(kind, dtype):
    from torch import nn
    from torch_geometric.nn import EdgeConv, GATConv, GCNConv, LGConv, SAGEConv, TAGConv

    from meshshard.models import MeshGraphNetBlock

    torch.manual_seed(1)
    if kind in ("gcn", "gcn_weighted"):
        layers = [GCNConv(F, F), GCNConv(F, F, improved=kind == "gcn_weighted")]
    elif kind == "sage":
        layers = [SAGEConv(F, F), SAGEConv(F, F, aggr="max")]
    elif kind == "gat":  # softmax over all incoming edges; self loops with mean edge features
        layers = [GATConv(F, F // 2, heads=2, edge_dim=D), GATConv(F, F, heads=1, edge_dim=D)]
    elif kind == "edgeconv":
        layers = [EdgeConv(nn.Sequential(nn.Linear(2 * F, F), nn.Tanh(), nn.Linear(F, F)), aggr=a) for a in ("max", "mean")]
    elif kind == "mgn":
        layers = [MeshGraphNetBlock(F, D, hidden=16) for _ in range(2)]
    elif kind == "lg":
        layers = [LGConv(), LGConv(normalize=True)]
    elif kind == "tag":  # a 2-hop layer, then a 1-hop one
        layers = [TAGConv(F, F, K=2), GCNConv(F, F)]
    return nn.ModuleList(layers).to(dtype)


def _run(layers, kind, x, ei, e, ew, conv_fn):
    """Two layers with tanh between; returns (node output, edge output or None)."""
    h, e_out = x, None
    for i, layer in enumerate(layers):
        if kind == "mgn":
            h, e = conv_fn(layer, i, h, ei, dict(edge_attr=e))
            e_out = e
        elif kind == "gat":
            h = conv_fn(layer, i, h, ei, dict(edge_attr=e))
        elif kind == "gcn_weighted":
            h = conv_fn(layer, i, h, ei, dict(edge_weight=ew))
        else:
            h = conv_fn(layer, i, h, ei, {})
        if i == 0:
            h = torch.tanh(h)
    return h, e_out


def _close(a, b, dtype, what):
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol * (1 + b.abs().max().item() if b.numel() else 1), f"{what}: max abs error {err:.3g}"


def _graphs(data_dir):
    pts, mesh_ei = load_graph(data_dir, "naca0012_inviscid.su2")
    brick_pts, brick_ei = load_graph(data_dir, "brick_tets.su2")
    return {"mesh": (pts, mesh_ei), "knn": (pts, knn_edges(pts, 6)), "brick": (brick_pts, brick_ei)}


def _inputs(case_no, kind, n, num_e, dtype):
    gen = torch.Generator().manual_seed(case_no)
    x = torch.randn(n, F, generator=gen, dtype=torch.float64).to(dtype)
    e = torch.randn(num_e, D, generator=gen, dtype=torch.float64).to(dtype)
    ew = (torch.rand(num_e, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
    wx = torch.randn(n, F, generator=gen, dtype=torch.float64).to(dtype)
    we = torch.randn(num_e, D, generator=gen, dtype=torch.float64).to(dtype)
    return x, e, ew, wx, we


def _reference(kind, layers, x, ei, e, ew, wx, we):
    """The plain layers on the whole graph in this process: outputs and all gradients."""
    xr, er, ewr = (t.clone().requires_grad_() for t in (x, e, ew))
    layers.zero_grad()
    out, e_out = _run(layers, kind, xr, ei, er, ewr, lambda l, i, h, ei_, kw: l(h, ei_, **kw))
    loss = (out * wx).sum() + ((e_out * we).sum() if e_out is not None else 0)
    loss.backward()
    ref = dict(out=out.detach(), e_out=None if e_out is None else e_out.detach(), x=xr.grad, e=er.grad, ew=ewr.grad,
               params=[p.grad.clone() for p in layers.parameters()])
    layers.zero_grad()
    return ref


def _sharded(kind, layers, g, mode, x, e, ew, wx, we, total_hops):
    """Run the layers on this rank's part; returns (out, e_out, x leaf, e leaf, ew leaf)."""
    from meshshard.ops import ShardedConv
    from meshshard.ops.conv import all_reduce_gradients

    hops = LAYER_HOPS.get(kind, [1, 1])
    xo = x[g.owned_ids].clone().requires_grad_()
    el = e[g.edge_ids].clone().requires_grad_()
    ewl = ew[g.edge_ids].clone().requires_grad_()
    if mode == "exchange":
        out, e_out = _run(layers, kind, xo, None, el, ewl, lambda l, i, h, _, kw: ShardedConv(l)(h, g, **kw))
    else:
        left = (lambda i: total_hops - sum(hops[:i])) if mode == "halo" else (lambda i: None)
        h0 = g.exchange(xo)
        out, e_out = _run(layers, kind, h0, None, el, ewl,
                          lambda l, i, h, _, kw: ShardedConv(l)(h, g, exchange=False, layers_left=left(i), **kw))
        out = out[: g.num_owned]
    n_own_e = int(g.edge_hop_ptr[1])
    loss = (out * wx[g.owned_ids]).sum()
    if e_out is not None:
        e_out = e_out[:n_own_e]
        loss = loss + (e_out * we[g.edge_ids[:n_own_e]]).sum()
    layers.zero_grad()
    loss.backward()
    all_reduce_gradients(layers)
    return out, e_out, xo, el, ewl


def _compare(kind, layers, g, ref, got, dtype, what):
    from meshshard.distributed import all_reduce

    out, e_out, xo, el, ewl = got
    n_own_e = int(g.edge_hop_ptr[1])
    _close(out.detach(), ref["out"][g.owned_ids], dtype, what + " output")
    if e_out is not None:
        _close(e_out.detach(), ref["e_out"][g.edge_ids[:n_own_e]], dtype, what + " edge output")
    _close(xo.grad, ref["x"][g.owned_ids], dtype, what + " grad x")
    for p, rp in zip(layers.parameters(), ref["params"]):
        _close(p.grad, rp, dtype, what + " grad param")
    # Edge inputs may be replicated (k-hop halo): their gradients sum over ranks.
    for leaf, ref_grad, used in ((el, ref["e"], kind in ("gat", "mgn")), (ewl, ref["ew"], kind == "gcn_weighted")):
        if not used:
            continue
        full = torch.zeros_like(ref_grad).index_add_(0, g.edge_ids, leaf.grad)
        all_reduce(full)
        _close(full, ref_grad, dtype, what + " grad edge input")


def _all_references(data_dir):
    """Single-process references of every case (computed once, shared by all world sizes)."""
    graphs = _graphs(data_dir)
    refs = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for case_no, (kind, graph_name, dtype) in enumerate(CASES):
            pts, ei = graphs[graph_name]
            x, e, ew, wx, we = _inputs(case_no, kind, pts.shape[0], ei.shape[1], dtype)
            refs.append(_reference(kind, _make_layers(kind, dtype), x, ei, e, ew, wx, we))
        zoo = _zoo_references(data_dir)
    finally:
        torch.set_num_threads(threads)
    return refs, zoo


@pytest.fixture(scope="module")
def references(data_dir):
    return _all_references(data_dir)


def _zoo():
    """More PyG layers, each with the hops one call reaches and whether it takes edge features."""
    import torch_geometric.nn as gnn
    from torch import nn

    hist = torch.tensor([0, 1, 4, 9, 6, 3, 1])  # a degree histogram (a hyper-parameter of PNA)
    return [
        ("GraphConv", lambda: gnn.GraphConv(F, F), 1, False),
        ("GINEConv", lambda: gnn.GINEConv(nn.Linear(F, F), edge_dim=D), 1, True),
        ("GATv2Conv", lambda: gnn.GATv2Conv(F, F // 2, heads=2, edge_dim=D), 1, True),
        ("TransformerConv", lambda: gnn.TransformerConv(F, F // 2, heads=2, edge_dim=D), 1, True),
        ("GENConv", lambda: gnn.GENConv(F, F, aggr="softmax", learn_t=True, edge_dim=D), 1, True),
        ("PNAConv", lambda: gnn.PNAConv(F, F, ["mean", "max", "std"], ["identity", "amplification"], hist, edge_dim=D), 1, True),
        ("ClusterGCNConv", lambda: gnn.ClusterGCNConv(F, F), 1, False),
        ("APPNP", lambda: gnn.APPNP(3, 0.1), 3, False),
        ("SGConv", lambda: gnn.SGConv(F, F, K=3), 3, False),
        ("MixHopConv", lambda: gnn.MixHopConv(F, F, powers=[0, 1, 2]), 2, False),
    ]


def _zoo_references(data_dir):
    pts, ei = load_graph(data_dir, "naca0012_inviscid.su2")
    x, e, _, _, _ = _inputs(99, "zoo", pts.shape[0], ei.shape[1], torch.float64)
    refs = []
    for name, make, hops, with_e in _zoo():
        torch.manual_seed(0)
        conv = make().double().eval()
        with torch.no_grad():
            refs.append(conv(x, ei, edge_attr=e) if with_e else conv(x, ei))
    return refs


def _zoo_check(pts, ei, part, refs):
    """Values of more layers in halo mode (exactly their hops) equal the whole-graph layer."""
    import meshshard as ms
    from meshshard.ops import ShardedConv

    x, e, _, _, _ = _inputs(99, "zoo", pts.shape[0], ei.shape[1], torch.float64)
    graphs = {}
    for (name, make, hops, with_e), ref in zip(_zoo(), refs):
        torch.manual_seed(0)
        conv = make().double().eval()
        if hops not in graphs:
            graphs[hops] = ms.ShardedGraph.from_partition(ei, part, halo_hops=hops)
        g = graphs[hops]
        kw = dict(edge_attr=e[g.edge_ids]) if with_e else {}
        out = ShardedConv(conv)(g.exchange(x[g.owned_ids]), g, exchange=False, **kw)[: g.num_owned]
        _close(out.detach(), ref[g.owned_ids], torch.float64, name)


def _conv_rank(rank, world, data_dir, references, parts):
    import meshshard as ms
    from meshshard.ops import ShardedConv
    from meshshard.ops.conv import all_reduce_gradients

    refs, zoo_refs = references
    graphs = _graphs(data_dir)
    done = []
    if world == 3:  # more PyG layers (values, float64, halo mode), on the Hilbert partition of case 1
        _zoo_check(*graphs["mesh"], make_partition(*graphs["mesh"], world, "hilbert"), zoo_refs)
        done.append("zoo")
    for case_no, (kind, graph_name, dtype) in enumerate(CASES):
        pts, ei = graphs[graph_name]
        x, e, ew, wx, we = _inputs(case_no, kind, pts.shape[0], ei.shape[1], dtype)
        layers = _make_layers(kind, dtype)
        ref = refs[case_no]
        total_hops = sum(LAYER_HOPS.get(kind, [1, 1]))
        method = _case_method(case_no, world)
        part = parts[case_no]
        assert part.num_parts == world and part.method.startswith(method)
        built = {}
        for mode in ("exchange", "halo", "halo_all_edges"):
            what = f"{kind}/{graph_name}/{dtype}/{mode}/{method}"
            if mode == "exchange":
                # mgn: exchange mode on a 1-hop graph at even world sizes, on a 2-hop one at odd
                hops = 2 if kind == "mgn" and world % 2 else 1
            else:
                hops = total_hops
            if hops not in built:
                built[hops] = ms.ShardedGraph.from_partition(ei, part, halo_hops=hops)
            g = built[hops]
            if mode == "exchange" and total_hops > 2:
                # a 2-hop layer cannot run with one exchange: a clear error on every rank
                with pytest.raises(ValueError, match="propagated 2 times"):
                    _sharded(kind, layers, g, mode, x, e, ew, wx, we, total_hops)
                done.append(what + " (refused)")
                continue
            got = _sharded(kind, layers, g, mode, x, e, ew, wx, we, total_hops)
            _compare(kind, layers, g, ref, got, dtype, what)
            done.append(what)

    # -- an empty rank: rank 1 owns no node (W >= 2), GCN (global degree) and MeshGraphNet blocks
    if world >= 2:
        pts, ei = graphs["mesh"]
        part = parts[-1]
        assert part.sizes[1] == 0
        for case_no in (0, 6):  # gcn and mgn on the mesh, float64
            kind = CASES[case_no][0]
            assert CASES[case_no][1:] == ("mesh", torch.float64)
            x, e, ew, wx, we = _inputs(case_no, kind, pts.shape[0], ei.shape[1], torch.float64)
            layers = _make_layers(kind, torch.float64)
            ref = refs[case_no]
            for mode in ("exchange", "halo"):
                g = ms.ShardedGraph.from_partition(ei, part, halo_hops=1 if mode == "exchange" else 2)
                assert (g.num_owned == 0) == (rank == 1)
                got = _sharded(kind, layers, g, mode, x, e, ew, wx, we, 2)
                _compare(kind, layers, g, ref, got, torch.float64, f"{kind}/empty rank/{mode}")
                done.append(f"{kind}/empty/{mode}")

    # -- ShardTensor node features in, values and gradients equal to plain tensors
    from torch import nn
    from torch_geometric.nn import GCNConv

    from meshshard.distributed import CollectiveMismatchError
    from meshshard.tensor import ShardTensor

    pts, mesh_ei = graphs["mesh"]
    g = ms.ShardedGraph.from_partition(mesh_ei, parts[0])
    conv = GCNConv(F, F).double()
    x = torch.randn(pts.shape[0], F, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    xo = x[g.owned_ids].clone().requires_grad_()
    st = ShardTensor.from_local(xo, ms.init_device_mesh("cpu", (world,)), (ms.Shard(0),),
                                sharding_shapes={0: [(s, F) for s in g.sizes]})
    out = ShardedConv(conv)(st, g)
    _close(out.detach(), conv(x, mesh_ei)[g.owned_ids].detach(), torch.float64, "ShardTensor input")
    out.square().sum().backward()  # every rank's loss: its owned rows; their sum is the whole-graph loss
    xr = x.clone().requires_grad_()
    conv(xr, mesh_ei).square().sum().backward()
    _close(xo.grad, xr.grad[g.owned_ids], torch.float64, "ShardTensor grad")

    # -- bad input raises the same error on every rank (no hang), and the group stays usable
    with pytest.raises(ValueError, match="owned rows"):
        ShardedConv(conv)(torch.zeros(g.num_owned + 1, F, dtype=torch.float64), g)
    if world > 1:
        with pytest.raises(CollectiveMismatchError):  # feature width differs on rank 0
            ShardedConv(conv)(torch.zeros(g.num_owned, F + (rank == 0), dtype=torch.float64), g)
        lin = nn.Linear(2, 2 + (rank == world - 1))
        lin(torch.zeros(1, 2)).sum().backward()
        with pytest.raises(CollectiveMismatchError):
            all_reduce_gradients(lin)
    out = ShardedConv(conv)(pts.new_ones(g.num_owned, F), g)
    assert out.shape == (g.num_owned, F)
    return done


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_sharded_conv_equals_whole_graph(world, data_dir, references):
    import meshshard as ms

    # Partitions are computed here once, not on every rank: case c uses _case_method(c, world);
    # the last entry puts no node on rank 1 (an empty rank) for W >= 2.
    graphs = _graphs(data_dir)
    parts = [make_partition(*graphs[g], world, _case_method(c, world)) for c, (_, g, _) in enumerate(CASES)]
    pts, ei = graphs["mesh"]
    base = make_partition(pts, ei, world - 1, "kdtree").assignment if world > 2 else torch.zeros(pts.shape[0], dtype=torch.long)
    parts.append(ms.Partition(base + (base >= 1).long(), world) if world >= 2 else None)
    results = run_distributed(_conv_rank, world, args=(str(data_dir), references, parts), timeout=TIMEOUT)
    assert len(results[0]) == 3 * len(CASES) + (4 if world >= 2 else 0) + (world == 3)
    assert sum("(refused)" in w for w in results[0]) == 1


def test_bad_input_single_process(data_dir):
    from torch_geometric.nn import GATConv, GCNConv

    import meshshard as ms
    from meshshard.ops import ShardedConv

    pts, ei = load_graph(data_dir, "naca0012_inviscid.su2")
    part = ms.Partition(torch.zeros(pts.shape[0], dtype=torch.long), 1)
    g = ms.ShardedGraph.from_partition(ei, part, halo_hops=2)
    x = torch.randn(g.num_owned, F)
    gat = GATConv(F, F, edge_dim=D)
    with pytest.raises(ValueError, match="edge_attr"):
        ShardedConv(gat)(x, g, edge_attr=torch.randn(ei.shape[1] - 1, D))
    with pytest.raises(ValueError, match="local rows"):
        ShardedConv(gat)(x[:-1], g, edge_attr=torch.randn(ei.shape[1], D), exchange=False)
    with pytest.raises(ValueError, match="layers_left"):
        ShardedConv(GCNConv(F, F))(x, g, exchange=False, layers_left=3)
    with pytest.raises(ValueError, match="flow"):
        ShardedConv(GCNConv(F, F, flow="target_to_source"))
    from torch import nn
    from torch_geometric.nn import ChebConv, DirGNNConv, SGConv

    with pytest.raises(ValueError, match="reversed edges"):  # needs out-edges of owned nodes
        ShardedConv(DirGNNConv(GCNConv(F, F)))
    with pytest.raises(ValueError, match="out-degree"):
        ShardedConv(ChebConv(F, F, K=2))

    class MyCheb(ChebConv):
        pass

    with pytest.raises(ValueError, match="ChebConv"):  # subclasses and containers too
        ShardedConv(nn.Sequential(nn.Identity(), MyCheb(F, F, K=1)))
    with pytest.raises(ValueError, match="hops"):
        ShardedConv(GCNConv(F, F), hops=0)
    with pytest.raises(TypeError, match="Module"):
        ShardedConv("GCNConv")
    sg = SGConv(F, F, K=2)
    with pytest.raises(ValueError, match="propagated 2 times"):
        ShardedConv(sg)(x, g)
    with pytest.raises(ValueError, match="propagated 2 times"):
        ShardedConv(sg)(g.exchange(x), g, exchange=False, layers_left=1)
    assert torch.allclose(ShardedConv(sg)(g.exchange(x), g, exchange=False), sg(x, ei), atol=1e-6)
    assert torch.allclose(ShardedConv(sg, hops=1)(x, g), sg(x, ei), atol=1e-6)  # declared: not checked
    # One part: the wrapped layer is the plain layer.
    conv = GCNConv(F, F)
    assert torch.allclose(ShardedConv(conv)(x, g), conv(x, ei), atol=1e-6)


def test_gcn_norm_layers_run_without_patching_pyg():
    """The gcn_norm adapter hands the layer its inputs: PyG's module-level gcn_norm stays PyG's own
    while a wrapped GCNConv runs (it used to be swapped for the duration of the call)."""
    import torch_geometric.nn.conv.gcn_conv as gcn_module
    from torch_geometric.nn import GCNConv

    import meshshard as ms
    from meshshard.ops import ShardedConv

    original, seen = gcn_module.gcn_norm, []
    conv = GCNConv(2, 2).double()
    conv.register_forward_pre_hook(lambda m, a: seen.append(gcn_module.gcn_norm is original))
    ei = torch.tensor([[0, 1, 1, 2, 3, 2], [1, 0, 2, 1, 2, 3]])
    g = ms.ShardedGraph.from_partition(ei, ms.partition(torch.rand(4, 2, dtype=torch.float64), 1, method="kdtree"))
    x = torch.randn(4, 2, dtype=torch.float64)
    out = ShardedConv(conv)(x[g.owned_ids], g)
    assert seen == [True]
    torch.testing.assert_close(out, conv(x, ei)[g.owned_ids], rtol=0, atol=1e-12)
