"""Every layer of ``torch_geometric.nn.conv`` and every model of ``torch_geometric.nn.models`` through
``DomainParallel``: exact, or refused with a message naming the layer; never wrong, never a crash.

Each class is built with small sizes (``_specs``: constructor and call per class; classes that cannot
run here are in ``NOT_RUN`` with the reason) and run at 3 gloo ranks in float64 on the naca0012 mesh
partitioned unevenly, twice: on a graph with ``halo_hops=1`` (one exchange per layer) and on one with
``halo_hops=2`` (``exchange="auto"``: one exchange per call when the hops fit). A model is *exact*
when its owned outputs and every parameter gradient (summed by DomainParallel in backward) equal one
process's to 1e-10, *refused* when it raises ``ValueError``/``TypeError``/``NotImplementedError`` whose
message names one of its module classes; anything else (a wrong value, another exception, an error
not naming the layer, ranks disagreeing) fails the test, and a hang fails it through the timeout.
Non-PyG message passing is in the sweep too: a MeshGraphNet written the reference system's way
(gathers with ``x[edge_index]``, sums with ``index_add_``) behind a five-line adapter.
"""
import copy
import inspect

import pytest
import torch
from torch import nn

from meshshard.testing import run_distributed

WORLD = 3
F, H, D, O = 4, 4, 3, 2
TIMEOUT = 600
TOL = 1e-10

# Classes of conv.__all__ / models.__all__ not run, with the reason (nothing else may be left out).
NOT_RUN = {
    "MessagePassing": "the abstract base class (no forward); every layer below is one",
    "CuGraphSAGEConv": "needs pylibcugraphops (CUDA only)",
    "CuGraphGATConv": "needs pylibcugraphops (CUDA only)",
    "CuGraphRGCNConv": "needs pylibcugraphops (CUDA only)",
    "FusedGATConv": "needs dgNN (CUDA only) and CSR/CSC inputs",
    "GravNetConv": "cannot be built without pyg-lib (its kNN), not installed; DomainParallel refuses it by name",
    "DynamicEdgeConv": "cannot be built without pyg-lib (its kNN), not installed; DomainParallel refuses it by name",
    "SGFormer": "fails in float64 in PyG itself (sgformer.py makes its all-ones tensor float32); its global "
                "attention over all nodes is Polynormer's mechanism, which is run",
    "PANConv": "needs torch_sparse (SparseTensor), not installed",
    "MeshCNNConv": "takes a triangle mesh's edges as nodes, each with exactly 4 neighbour edges, not a node graph",
    "SplineConv": "needs torch_spline_conv, not installed",
    "XConv": "builds its own kNN graph with torch_cluster, not installed",
    "Node2Vec": "random walks need torch_cluster, not installed; an embedding table over all nodes, no (x, edge_index) call",
    "MetaPath2Vec": "random walks need torch_sparse, not installed; heterogeneous embedding tables",
    "SchNet": "builds its radius graph with torch_cluster, not installed; a molecule model (z, pos, batch)",
    "DimeNet": "builds its radius graph with torch_cluster, not installed; a molecule model (z, pos, batch)",
    "DimeNetPlusPlus": "builds its radius graph with torch_cluster, not installed; a molecule model (z, pos, batch)",
    "ViSNet": "builds its radius graph with torch_cluster, not installed; a molecule model (z, pos, batch)",
    "GNNFF": "builds its radius graph with torch_cluster, not installed; a molecule model (z, pos, batch)",
    "RENet": "a temporal knowledge-graph model called on event histories (Data), no (x, edge_index) call",
    "TGNMemory": "a temporal memory called on node ids and event streams, no (x, edge_index) call",
    "GPSE": "called on a Batch of precomputed positional encodings, no (x, edge_index) call",
    "LPFormer": "link prediction on node pairs with a PPR matrix, no per-node output",
    "ARLinkPredictor": "link prediction on node pairs, no per-node output",
    "CorrectAndSmooth": "no forward: its correct()/smooth() are LabelPropagation steps (LabelPropagation is run)",
}


class Adapter(nn.Module):
    """A user's adapter: ``forward(x, edge_index, *extra)`` calls ``fn(module, x, edge_index, *extra)``."""

    def __init__(self, module, fn):
        super().__init__()
        self.module, self.fn = module, fn

    def forward(self, x, edge_index, *extra):
        return self.fn(self.module, x, edge_index, *extra)


class ScatterMGN(nn.Module):
    """MeshGraphNet the way the reference system writes it: no PyG, gathers with ``x[edge_index]``
    and sums with ``index_add_``; ``layers`` processor steps."""

    def __init__(self, layers):
        super().__init__()
        self.enc = nn.Linear(F, H)
        self.edge = nn.ModuleList([nn.Linear(2 * H + D, D) for _ in range(layers)])
        self.node = nn.ModuleList([nn.Linear(H + D, H) for _ in range(layers)])
        self.dec = nn.Linear(H, O)

    def forward(self, x, edge_index, edge_attr):
        h, e = torch.tanh(self.enc(x)), edge_attr
        for edge, node in zip(self.edge, self.node):
            xs = h[edge_index]  # [2, E, H]
            e = e + torch.tanh(edge(torch.cat([xs[0], xs[1], e], -1)))
            agg = torch.zeros(h.shape[0], e.shape[1], dtype=h.dtype).index_add_(0, edge_index[1], e)
            h = h + torch.tanh(node(torch.cat([h, agg], -1)))
        return self.dec(h)


def _specs(deg_hist):
    """name -> (factory, extra argument names, x kind). Extra arguments: ew (edge weights), ea (edge
    features), et (edge types), pos / normal / nt / batch / y (node rows), neg (a second edge_index,
    global ids). x kinds: "f" float [N, F], "colour" long [N], "seq" float [N, 2, H], "label" long [N]."""
    import torch_geometric.nn as gnn
    from torch_geometric.nn import conv as c
    from torch_geometric.nn import models as m

    lin = lambda i, o: nn.Linear(i, o)  # noqa: E731
    pna = dict(aggregators=["mean", "max"], scalers=["identity", "amplification"], deg=deg_hist)
    call_pos = lambda mod, x, ei, pos: mod(x, pos, ei)  # noqa: E731
    s = {
        "SimpleConv": (lambda: c.SimpleConv(), ()),
        "GCNConv": (lambda: c.GCNConv(F, H), ("ew",)),
        "ChebConv": (lambda: c.ChebConv(F, H, K=2), ()),
        "SAGEConv": (lambda: c.SAGEConv(F, H), ()),
        "GraphConv": (lambda: c.GraphConv(F, H), ("ew",)),
        "GatedGraphConv": (lambda: c.GatedGraphConv(H, num_layers=2), ()),
        "ResGatedGraphConv": (lambda: c.ResGatedGraphConv(F, H, edge_dim=D), ("ea",)),
        "GATConv": (lambda: c.GATConv(F, H, heads=2, edge_dim=D), ("ea",)),
        "GATv2Conv": (lambda: c.GATv2Conv(F, H, heads=2, edge_dim=D), ("ea",)),
        "TransformerConv": (lambda: c.TransformerConv(F, H, heads=2, edge_dim=D, beta=True), ("ea",)),
        "AGNNConv": (lambda: c.AGNNConv(), ()),
        "TAGConv": (lambda: c.TAGConv(F, H, K=2), ()),
        "GINConv": (lambda: c.GINConv(lin(F, H), train_eps=True), ()),
        "GINEConv": (lambda: c.GINEConv(lin(F, H), edge_dim=D), ("ea",)),
        "ARMAConv": (lambda: c.ARMAConv(F, H, num_stacks=2, num_layers=2), ()),
        "SGConv": (lambda: c.SGConv(F, H, K=2), ()),
        "SSGConv": (lambda: c.SSGConv(F, H, alpha=0.1, K=2), ()),
        "APPNP": (lambda: c.APPNP(K=2, alpha=0.1), ()),
        "MFConv": (lambda: c.MFConv(F, H), ()),
        "RGCNConv": (lambda: c.RGCNConv(F, H, num_relations=3), ("et",)),
        "FastRGCNConv": (lambda: c.FastRGCNConv(F, H, num_relations=3), ("et",)),
        "RGATConv": (lambda: c.RGATConv(F, H, num_relations=3), ("et",)),
        "SignedConv": (lambda: c.SignedConv(F, H, first_aggr=True), ("neg",)),
        "DNAConv": (lambda: c.DNAConv(H, heads=1), (), "seq"),
        "PointNetConv": (lambda: Adapter(c.PointNetConv(lin(F + 2, H)), call_pos), ("pos",)),
        "GMMConv": (lambda: c.GMMConv(F, H, dim=D, kernel_size=2), ("ea",)),
        "NNConv": (lambda: c.NNConv(F, H, nn=lin(D, F * H)), ("ea",)),
        "CGConv": (lambda: c.CGConv(F, dim=D), ("ea",)),
        "EdgeConv": (lambda: c.EdgeConv(lin(2 * F, H)), ()),
        "PPFConv": (lambda: Adapter(c.PPFConv(lin(F + 4, H)), lambda mod, x, ei, pos, n: mod(x, pos, n, ei)),
                    ("pos3", "normal3")),
        "FeaStConv": (lambda: c.FeaStConv(F, H, heads=2), ()),
        "PointTransformerConv": (lambda: Adapter(c.PointTransformerConv(F, H), call_pos), ("pos3",)),
        "HypergraphConv": (lambda: c.HypergraphConv(F, H), ()),
        "LEConv": (lambda: c.LEConv(F, H), ()),
        "PNAConv": (lambda: c.PNAConv(F, H, **pna), ()),
        "ClusterGCNConv": (lambda: c.ClusterGCNConv(F, H), ()),
        "GENConv": (lambda: c.GENConv(F, H), ()),
        "GCN2Conv": (lambda: Adapter(c.GCN2Conv(F, alpha=0.1), lambda mod, x, ei: mod(x, x, ei)), ()),
        "WLConv": (lambda: c.WLConv(), (), "colour"),
        "WLConvContinuous": (lambda: c.WLConvContinuous(), ()),
        "FiLMConv": (lambda: c.FiLMConv(F, H), ()),
        "SuperGATConv": (lambda: c.SuperGATConv(F, H, heads=2), ()),
        "FAConv": (lambda: Adapter(c.FAConv(F, eps=0.1), lambda mod, x, ei: mod(x, x, ei)), ()),
        "EGConv": (lambda: c.EGConv(F, H, num_heads=2, num_bases=2), ()),
        "PDNConv": (lambda: c.PDNConv(F, H, edge_dim=D, hidden_channels=4), ("ea",)),
        "GeneralConv": (lambda: c.GeneralConv(F, H, in_edge_channels=D), ("ea",)),
        "HGTConv": (lambda: Adapter(c.HGTConv(F, H, (["a"], [("a", "to", "a")]), heads=2),
                                    lambda mod, x, ei: mod({"a": x}, {("a", "to", "a"): ei})["a"]), ()),
        "HEATConv": (lambda: c.HEATConv(F, H, num_node_types=2, num_edge_types=3, edge_type_emb_dim=2, edge_dim=D,
                                        edge_attr_emb_dim=2, heads=2), ("nt", "et", "ea")),
        "HeteroConv": (lambda: Adapter(gnn.HeteroConv({("a", "to", "a"): c.SAGEConv(F, H)}),
                                       lambda mod, x, ei: mod({"a": x}, {("a", "to", "a"): ei})["a"]), ()),
        "HANConv": (lambda: Adapter(c.HANConv(F, H, (["a"], [("a", "to", "a")]), heads=2),
                                    lambda mod, x, ei: mod({"a": x}, {("a", "to", "a"): ei})["a"]), ()),
        "LGConv": (lambda: c.LGConv(), ()),
        "PointGNNConv": (lambda: Adapter(c.PointGNNConv(lin(F, 2), lin(F + 2, H), lin(H, F)), call_pos), ("pos",)),
        "GPSConv": (lambda: c.GPSConv(F, c.GINConv(lin(F, F)), heads=2, norm=None), ()),
        "AntiSymmetricConv": (lambda: c.AntiSymmetricConv(F, num_iters=2), ()),
        "DirGNNConv": (lambda: c.DirGNNConv(c.SAGEConv(F, H)), ()),
        "MixHopConv": (lambda: c.MixHopConv(F, H, powers=[0, 1, 2]), ()),
        # models
        "MLP": (lambda: Adapter(m.MLP([F, H, O]), lambda mod, x, ei: mod(x)), ()),
        "GCN": (lambda: m.GCN(F, H, 2, O), ("ew",)),
        "GraphSAGE": (lambda: m.GraphSAGE(F, H, 2, O, jk="cat"), ()),
        "GIN": (lambda: m.GIN(F, H, 2, O), ()),
        "GAT": (lambda: m.GAT(F, H, 2, O, heads=2, edge_dim=D, v2=True), ("ea",)),
        "PNA": (lambda: m.PNA(F, H, 2, O, **pna), ()),
        "EdgeCNN": (lambda: m.EdgeCNN(F, H, 2, O), ()),
        "JumpingKnowledge": (lambda: Adapter(m.JumpingKnowledge("lstm", F, 2), lambda mod, x, ei: mod([x, 2 * x])), ()),
        "HeteroJumpingKnowledge": (lambda: Adapter(m.HeteroJumpingKnowledge(["a"], "max"),
                                                   lambda mod, x, ei: mod({"a": [x, 2 * x]})["a"]), ()),
        "MetaLayer": (lambda: m.MetaLayer(_MetaEdge(), _MetaNode()), ("ea",)),
        "DeepGraphInfomax": (lambda: m.DeepGraphInfomax(H, m.GCN(F, H, 1), lambda z, *a: z.mean(0).sigmoid(),
                                                        lambda x, ei: (x[torch.randperm(x.shape[0])], ei)), ()),
        "InnerProductDecoder": (lambda: Adapter(m.InnerProductDecoder(), lambda mod, x, ei: mod(x, ei)), ()),
        "GAE": (lambda: m.GAE(m.GCN(F, H, 2, O)), ()),
        "VGAE": (lambda: m.VGAE(_TwoHeads()), ()),
        "ARGA": (lambda: m.ARGA(m.GraphSAGE(F, H, 2, O), lin(O, 1)), ()),
        "ARGVA": (lambda: m.ARGVA(_TwoHeads(), lin(O, 1)), ()),
        "SignedGCN": (lambda: m.SignedGCN(F, H, num_layers=2), ("neg",)),
        "GraphUNet": (lambda: m.GraphUNet(F, H, O, depth=2), ()),
        "GPSENodeEncoder": (lambda: Adapter(m.GPSENodeEncoder(H, F, 2, F, norm_type="none", dropout_be=0.0,
                                                                 dropout_ae=0.0),
                                            lambda mod, x, ei: mod(x, x)), ()),
        "DeepGCNLayer": (lambda: m.DeepGCNLayer(c.GENConv(F, F, norm=None), nn.LayerNorm(F), nn.ReLU(),
                                                ckpt_grad=False), ()),
        "DeepGCNLayer(ckpt_grad=True)": (lambda: m.DeepGCNLayer(c.GENConv(F, F, norm=None), nn.LayerNorm(F),
                                                                nn.ReLU(), ckpt_grad=True), ()),
        "LabelPropagation": (lambda: m.LabelPropagation(num_layers=2, alpha=0.9), (), "label"),
        "AttentiveFP": (lambda: m.AttentiveFP(F, H, O, edge_dim=D, num_layers=2, num_timesteps=2), ("ea", "batch")),
        "RECT_L": (lambda: m.RECT_L(F, H), ("ew",)),
        "LINKX": (lambda: m.LINKX(_N[0], F, H, O, num_layers=1), ()),
        "LightGCN": (lambda: Adapter(m.LightGCN(_N[0], H, num_layers=2), lambda mod, x, ei: mod.get_embedding(ei)), ()),
        "MaskLabel": (lambda: Adapter(m.MaskLabel(3, F), lambda mod, x, ei, y: mod(x, y, y > 0)), ("y",)),
        "GroupAddRev": (lambda: m.GroupAddRev(c.SAGEConv(F // 2, F // 2), num_groups=2), ()),
        "PMLP": (lambda: m.PMLP(F, H, O, num_layers=2, norm=False), ()),
        "NeuralFingerprint": (lambda: m.NeuralFingerprint(F, H, O, num_layers=2), ()),
        "Polynormer": (lambda: m.Polynormer(F, H, O, local_layers=1, global_layers=1, in_dropout=0.0, dropout=0.0,
                                            global_dropout=0.0, post_bn=False), ("batch",)),
        "Polynormer(global)": (lambda: _global_stage(m.Polynormer(F, H, O, local_layers=1, global_layers=1,
                                                                   in_dropout=0.0, dropout=0.0, global_dropout=0.0,
                                                                   post_bn=False)), ("batch",)),
        # message passing that is not PyG's, behind an adapter
        "ScatterMGN(layers=1)": (lambda: ScatterMGN(1), ("ea",)),
        "ScatterMGN(layers=2)": (lambda: ScatterMGN(2), ("ea",)),
        "ScatterMGN(layers=3)": (lambda: ScatterMGN(3), ("ea",)),
    }
    return {k: v if len(v) == 3 else v + ("f",) for k, v in s.items()}


def _global_stage(model):
    model._global = True  # Polynormer's second training stage: global attention over all nodes
    return model


_N = [0]  # number of nodes, set before the specs are built (LINKX, LightGCN take it)


class _MetaEdge(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2 * F + D, D)

    def forward(self, src, dst, edge_attr, u, batch):
        return torch.tanh(self.lin(torch.cat([src, dst, edge_attr], 1)))


class _MetaNode(nn.Module):  # PyG's MetaLayer example: gathers x[row], scatters into col
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2 * F + D, F)

    def forward(self, x, edge_index, edge_attr, u, batch):
        from torch_geometric.utils import scatter

        row, col = edge_index
        out = torch.cat([x[row], edge_attr], 1)
        return torch.tanh(self.lin(torch.cat([x, scatter(out, col, 0, dim_size=x.size(0), reduce="mean")], 1)))


class _TwoHeads(nn.Module):  # a VGAE encoder: (mu, logstd)
    def __init__(self):
        super().__init__()
        from torch_geometric.nn import GCNConv, SAGEConv

        self.mu, self.logstd = SAGEConv(F, O), GCNConv(F, O)

    def forward(self, x, edge_index):
        return self.mu(x, edge_index), self.logstd(x, edge_index)


def _names(model):
    return {type(m).__name__ for m in model.modules()}


def _data(pos_np, ei):
    n, e = pos_np.shape[0], ei.shape[1]
    gen = torch.Generator().manual_seed(7)
    pos = torch.as_tensor(pos_np, dtype=torch.float64)
    normal = torch.nn.functional.normalize(torch.randn(n, 2, generator=gen, dtype=torch.float64), dim=1)
    neg = ei[:, torch.randperm(e, generator=gen)[: e // 4]].flip(0)
    return {
        "f": torch.randn(n, F, generator=gen, dtype=torch.float64),
        "colour": torch.randint(0, 3, (n,), generator=gen),
        "seq": torch.randn(n, 2, H, generator=gen, dtype=torch.float64),
        "label": torch.randint(0, 3, (n,), generator=gen),
        "ew": torch.rand(e, generator=gen, dtype=torch.float64) + 0.5,
        "ea": torch.randn(e, D, generator=gen, dtype=torch.float64),
        "et": torch.randint(0, 3, (e,), generator=gen),
        "pos": pos, "normal": normal,
        "pos3": torch.cat([pos, torch.zeros(n, 1, dtype=torch.float64)], 1),
        "normal3": torch.cat([normal, torch.zeros(n, 1, dtype=torch.float64)], 1),
        "nt": torch.randint(0, 2, (n,), generator=gen),
        "batch": torch.zeros(n, dtype=torch.long),
        "y": torch.randint(0, 3, (n,), generator=gen),
        "neg": neg,
    }


NODE_ARGS = {"pos", "normal", "pos3", "normal3", "nt", "batch", "y"}


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _loss(outs, weights):
    total = 0.0
    for o, w in zip(outs, weights):
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad:
            total = total + (o * w[: o.shape[0]]).sum()
    return total


def _own(r, x, ei, g, owned):
    """The rows of a whole-graph output this rank returns: owned nodes, or edges into owned nodes."""
    if r.dim() and r.shape[0] == x.shape[0]:
        return r[owned]
    if r.dim() and r.shape[0] == ei.shape[1]:
        return r[g.edge_ids[: int(g.edge_hop_ptr[1])]]
    return r


def _run_one(name, spec, data, ei, g, owned):
    """One model at one graph: ("exact", "") / ("refused", message) / ("wrong", what) / ("crash", what)."""
    import meshshard as ms
    from meshshard.tensor import ShardTensor

    factory, extras, xkind = spec
    from meshshard.models import broadcast_parameters

    torch.manual_seed(0)
    ref = factory().double()
    broadcast_parameters(ref)  # a layer may leave a parameter uninitialised (RGATConv), different per process
    ref.train()
    model = copy.deepcopy(ref)
    x = data[xkind]
    args = [data[a].clone() for a in extras]  # fresh copies: GroupAddRev frees its input's storage
    torch.manual_seed(1)
    out_ref = _outputs(ref(x.clone(), ei, *args))
    gen = torch.Generator().manual_seed(11)
    weights = [torch.randn(o.shape, generator=gen, dtype=torch.float64) if isinstance(o, torch.Tensor) else None
               for o in out_ref]
    loss = _loss(out_ref, weights)
    if isinstance(loss, torch.Tensor):
        loss.backward()
    names = _names(ref)
    try:
        dp = ms.DomainParallel(model)
        dargs = [data[a][owned] if a in NODE_ARGS else data[a] for a in extras]
        torch.manual_seed(1)
        out = _outputs(dp(x[owned].clone(), g, *dargs))
        out = [o.to_local() if isinstance(o, ShardTensor) else o for o in out]
        for i, (o, r) in enumerate(zip(out, out_ref)):
            if not isinstance(r, torch.Tensor):
                continue
            r_own = _own(r, x, ei, g, owned)
            if not isinstance(o, torch.Tensor) or o.shape != r_own.shape:
                return "wrong", f"output {i}: shape {getattr(o, 'shape', type(o).__name__)} != {tuple(r_own.shape)}"
            err = (o.detach().double() - r_own.detach().double()).abs().max().item() if o.numel() else 0.0
            if not err <= TOL * (1 + r_own.detach().double().abs().max().item()):
                return "wrong", f"output {i}: max abs error {err:.3g}"
        w_own = [_own(w, x, ei, g, owned) if w is not None else w for w in weights]
        loss = _loss(out, w_own)
        if isinstance(loss, torch.Tensor):
            loss.backward()
        elif any(p.requires_grad for p in model.parameters()):
            loss = sum(p.sum() * 0 for p in model.parameters())
            loss.backward()
    except (ValueError, TypeError, NotImplementedError) as exc:
        msg = str(exc)
        if any(n in msg for n in names):
            return "refused", msg.splitlines()[0][:300]
        return "crash", f"{type(exc).__name__} not naming the layer: {msg[:300]}"
    except Exception as exc:  # noqa: BLE001 - a crash is a result here
        return "crash", f"{type(exc).__name__}: {str(exc)[:300]}"
    for (pname, p), pr in zip(model.named_parameters(), ref.parameters()):
        a = p.grad if p.grad is not None else torch.zeros_like(p)
        b = pr.grad if pr.grad is not None else torch.zeros_like(pr)
        err = (a - b).abs().max().item() if a.numel() else 0.0
        if not err <= TOL * (1 + b.abs().max().item()):
            return "wrong", f"gradient of {pname}: max abs error {err:.3g}"
    return "exact", ""


def _sweep(rank, world, data_dir, only=None):
    import meshshard as ms
    from meshshard.distributed import all_gather_sizes
    from torch_geometric.utils import degree

    torch.set_num_threads(1)
    mesh = ms.read_mesh(data_dir / "naca0012_inviscid.su2")
    ei = mesh.edge_index()
    n = mesh.points.shape[0]
    _N[0] = n
    part = ms.partition(torch.as_tensor(mesh.points), world, method="inertial", edge_index=ei, refine=False)
    data = _data(mesh.points, ei)
    deg_hist = torch.bincount(degree(ei[1], n, dtype=torch.long))
    specs = _specs(deg_hist)
    results = {}
    for hops in (1, 2):
        g = ms.ShardedGraph.from_partition(ei, part, halo_hops=hops)
        owned = g.owned_ids
        for name, spec in specs.items():
            if only is not None and name not in only:
                continue
            status, detail = _run_one(name, spec, data, ei, g, owned)
            # every rank must reach the same verdict (a group out of step is a failure)
            code = ["exact", "refused", "wrong", "crash"].index(status)
            table = all_gather_sizes([code]).view(-1).tolist()
            if len(set(table)) != 1:
                status, detail = "crash", f"ranks disagree: {table} ({status}: {detail})"
            results[(name, hops)] = (status, detail)
    return results


def test_every_class_is_run_or_listed():
    """Every class of conv.__all__ and models.__all__ is in the sweep or in NOT_RUN with a reason."""
    from torch_geometric.nn import conv, models

    specs = _specs(torch.ones(3))
    classes = [n for mod in (conv, models) for n in mod.__all__ if inspect.isclass(getattr(mod, n))]
    missing = [n for n in classes if n not in specs and n not in NOT_RUN]
    assert not missing, f"neither run nor listed: {missing}"
    assert not set(specs) & set(NOT_RUN)


def test_pyg_sweep_exact_or_refused(data_dir):
    results = run_distributed(_sweep, world_size=WORLD, args=(data_dir,), timeout=TIMEOUT)
    merged = results[0]
    bad = {k: v for k, v in merged.items() if v[0] in ("wrong", "crash")}
    tally = {s: sum(v[0] == s for v in merged.values()) for s in ("exact", "refused", "wrong", "crash")}
    assert not bad, f"tally {tally}; wrong or crashing: " + "; ".join(f"{k}: {v}" for k, v in sorted(bad.items()))
    for r in results[1:]:
        assert {k: v[0] for k, v in r.items()} == {k: v[0] for k, v in merged.items()}


def _bad_input_on_one_rank(rank, world, data_dir):
    import meshshard as ms
    from meshshard.distributed import CollectiveMismatchError
    from torch_geometric.nn import SAGEConv

    mesh = ms.read_mesh(data_dir / "naca0012_inviscid.su2")
    ei = mesh.edge_index()
    part = ms.partition(torch.as_tensor(mesh.points), world, method="kdtree", edge_index=ei, refine=False)
    g = ms.ShardedGraph.from_partition(ei, part)
    torch.manual_seed(0)
    dp = ms.DomainParallel(SAGEConv(F, H).double())
    rows = g.num_owned - (1 if rank == 0 else 0)  # rank 0 breaks the contract, the others keep it
    with pytest.raises(CollectiveMismatchError, match=r"rank\(s\) \[0\].*SAGEConv"):
        dp(torch.zeros(rows, F, dtype=torch.float64), g)
    out = dp(torch.zeros(g.num_owned, F, dtype=torch.float64), g)  # the group is still in step
    return out.to_local().shape[0] == g.num_owned


def test_bad_input_on_one_rank_raises_on_every_rank(data_dir):
    assert all(run_distributed(_bad_input_on_one_rank, world_size=2, args=(data_dir,), timeout=120))
