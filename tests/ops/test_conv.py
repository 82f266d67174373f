"""ShardedConv on 1-4 gloo ranks equals the PyG layer on the whole graph: owned outputs, input
gradients (nodes, edge features, edge weights) and parameter gradients, in both modes
(exchange per layer; one exchange with a 2-hop halo)."""
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
]


def _make_layers(kind, dtype):
    from torch import nn
    from torch_geometric.nn import EdgeConv, GATConv, GCNConv, SAGEConv

    from meshshard.ops.conv import MeshGraphNetBlock

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


def _conv_rank(rank, world, data_dir):
    import meshshard as ms
    from meshshard.distributed import all_reduce
    from meshshard.ops import ShardedConv
    from meshshard.ops.conv import all_reduce_gradients

    pts, mesh_ei = load_graph(data_dir, "naca0012_inviscid.su2")
    graphs = {"mesh": mesh_ei, "knn": knn_edges(pts, 6)}
    n = pts.shape[0]
    done = []
    for case_no, (kind, graph_name, dtype) in enumerate(CASES):
        ei = graphs[graph_name]
        num_e = ei.shape[1]
        gen = torch.Generator().manual_seed(case_no)
        x = torch.randn(n, F, generator=gen, dtype=torch.float64).to(dtype)
        e = torch.randn(num_e, D, generator=gen, dtype=torch.float64).to(dtype)
        ew = (torch.rand(num_e, generator=gen, dtype=torch.float64) + 0.5).to(dtype)
        wx = torch.randn(n, F, generator=gen, dtype=torch.float64).to(dtype)
        we = torch.randn(num_e, D, generator=gen, dtype=torch.float64).to(dtype)
        layers = _make_layers(kind, dtype)
        params = list(layers.parameters())

        # Reference: the plain layers on the whole graph in this process.
        xr, er, ewr = (t.clone().requires_grad_() for t in (x, e, ew))
        out, e_out = _run(layers, kind, xr, ei, er, ewr, lambda l, i, h, ei_, kw: l(h, ei_, **kw))
        loss = (out * wx).sum() + ((e_out * we).sum() if e_out is not None else 0)
        loss.backward()
        ref_params = [p.grad.clone() for p in params]

        method = METHODS[(case_no + world) % len(METHODS)]
        part = make_partition(pts, ei, world, method)
        for mode in ("exchange", "halo", "halo_all_edges"):
            hops = 1 if mode == "exchange" and kind != "mgn" else 2  # mgn: exchange mode on a 2-hop graph
            g = ms.ShardedGraph.from_partition(ei, part, halo_hops=hops)
            layers.zero_grad()
            xo = x[g.owned_ids].clone().requires_grad_()
            el = e[g.edge_ids].clone().requires_grad_()
            ewl = ew[g.edge_ids].clone().requires_grad_()
            if mode == "exchange":
                out, e_out = _run(layers, kind, xo, None, el, ewl,
                                  lambda l, i, h, _, kw: ShardedConv(l)(h, g, **kw))
            else:
                left = (lambda i: 2 - i) if mode == "halo" else (lambda i: None)
                h0 = g.exchange(xo)
                out, e_out = _run(layers, kind, h0, None, el, ewl,
                                  lambda l, i, h, _, kw: ShardedConv(l)(h, g, exchange=False, layers_left=left(i), **kw))
                out = out[: g.num_owned]
            n_own_e = int(g.edge_hop_ptr[1])
            owned_eids = g.edge_ids[:n_own_e]
            what = f"{kind}/{graph_name}/{dtype}/{mode}/{method}"
            loss = (out * wx[g.owned_ids]).sum()
            if e_out is not None:
                e_owned = e_out[:n_own_e]
                loss = loss + (e_owned * we[owned_eids]).sum()
            loss.backward()
            all_reduce_gradients(layers)
            with torch.no_grad():
                ref_out, ref_e = _run(layers, kind, x, ei, e, ew, lambda l, i, h, ei_, kw: l(h, ei_, **kw))
            _close(out.detach(), ref_out[g.owned_ids], dtype, what + " output")
            if e_out is not None:
                _close(e_out[:n_own_e].detach(), ref_e[owned_eids], dtype, what + " edge output")
            _close(xo.grad, xr.grad[g.owned_ids], dtype, what + " grad x")
            for p, rp in zip(params, ref_params):
                _close(p.grad, rp, dtype, what + " grad param")
            # Edge inputs may be replicated (2-hop halo): their gradients sum over ranks.
            for leaf, ref_leaf, used in ((el, er, kind in ("gat", "mgn")), (ewl, ewr, kind == "gcn_weighted")):
                if not used:
                    continue
                full = torch.zeros_like(ref_leaf).index_add_(0, g.edge_ids, leaf.grad)
                all_reduce(full)
                _close(full, ref_leaf.grad, dtype, what + " grad edge input")
            done.append(what)

    # Bad input raises the same error on every rank (no hang), and the group stays usable.
    from torch import nn
    from torch_geometric.nn import GCNConv

    from meshshard.distributed import CollectiveMismatchError

    g = ms.ShardedGraph.from_partition(mesh_ei, make_partition(pts, mesh_ei, world, "kdtree"))
    conv = GCNConv(F, F).double()
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
def test_sharded_conv_equals_whole_graph(world, data_dir):
    results = run_distributed(_conv_rank, world, args=(str(data_dir),), timeout=TIMEOUT)
    assert len(results[0]) == 3 * len(CASES)


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
    # One part: the wrapped layer is the plain layer.
    conv = GCNConv(F, F)
    assert torch.allclose(ShardedConv(conv)(x, g), conv(x, ei), atol=1e-6)
