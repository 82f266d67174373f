"""DomainParallel on 1-4 gloo ranks equals the unmodified model on the whole graph in one process.

One spawned group per world size runs every check: for GCN (edge weights), GraphSAGE, GAT (edge
features), GIN from ``torch_geometric.nn.models``, a custom MessagePassing stack with edge features,
and MeshGraphNet, the owned outputs, every parameter gradient after ``loss.backward()`` (summed by
DomainParallel's hooks, no explicit call) and the parameters after one optimizer step, in float64
(1e-10) and float32 (1e-5). Inputs alternate between plain tensors and ShardTensors, edge features
between global-edge and local-edge rows, graphs between halo_hops=1 (one exchange per layer) and
halo_hops=2 (one exchange per call); world size W uses partition method ``METHODS[W]`` and runs
the cases of its parity (each case at two world sizes). Inside the
group: the replica check at wrap time, refused layers, ``no_sync`` accumulation and accumulation
across steps without zeroing the gradients; at 4 ranks, a 2 x 2 ("data", "domain") mesh (gradients
of two samples' mean, and ``reduce_gradients`` on a data group without a sample).
"""
import pytest
import torch

from meshshard.testing import run_distributed

METHODS = {1: "kdtree", 2: "hilbert", 3: "inertial", 4: "graph"}
F, D, OUT = 5, 3, 2
TIMEOUT = 240


def _mesh(data_dir):
    import meshshard as ms

    mesh = ms.read_mesh(data_dir / "naca0012_inviscid.su2")
    return torch.as_tensor(mesh.points, dtype=torch.float64), mesh.edge_index()


def _model(kind):
    from torch import nn
    from torch_geometric.nn import MessagePassing
    from torch_geometric.nn.models import GAT, GCN, GIN, GraphSAGE

    from meshshard.models import MeshGraphNet

    class EdgeGate(MessagePassing):  # a user's layer: messages gated by edge features
        def __init__(self):
            super().__init__(aggr="add")
            self.lin = nn.Linear(F + D, F)
            self.gate = nn.Linear(D, F)

        def forward(self, x, edge_index, edge_attr):
            return x + self.propagate(edge_index, x=x, edge_attr=edge_attr)

        def message(self, x_j, edge_attr):
            return torch.tanh(self.lin(torch.cat([x_j, edge_attr], -1))) * torch.sigmoid(self.gate(edge_attr))

    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([EdgeGate(), EdgeGate()])
            self.head = nn.Linear(F, OUT)

        def forward(self, x, edge_index, edge_attr):
            for conv in self.convs:
                x = torch.relu(conv(x, edge_index, edge_attr))
            return self.head(x)

    torch.manual_seed(0)
    return {
        "gcn": lambda: GCN(F, 8, 2, OUT),
        "sage": lambda: GraphSAGE(F, 8, 2, OUT),
        "gat": lambda: GAT(F, 8, 2, OUT, heads=2, edge_dim=D),
        "gin": lambda: GIN(F, 8, 2, OUT),
        "stack": Stack,
        "mgn": lambda: MeshGraphNet(F, D, OUT, hidden=8, num_layers=2, mlp_layers=1),
    }[kind]()


# (model, dtype, halo_hops, ShardTensor input, global-edge features)
CASES = [
    ("gcn", torch.float64, 2, False, True),
    ("sage", torch.float64, 1, True, False),
    ("gat", torch.float64, 1, False, True),
    ("gin", torch.float64, 2, True, False),
    ("stack", torch.float64, 2, False, False),
    ("mgn", torch.float64, 1, True, True),
    ("mgn", torch.float64, 2, False, False),
    ("gat", torch.float32, 2, True, False),
    ("mgn", torch.float32, 1, False, True),
]


def _cases(world):
    """Case ``c`` runs at the two world sizes of its parity, so each model meets two partitioners."""
    return [c for i, c in enumerate(CASES) if (i + world) % 2 == 0]


def _inputs(n, num_e, dtype):
    gen = torch.Generator().manual_seed(3)
    return (torch.randn(n, F, generator=gen, dtype=torch.float64).to(dtype),
            torch.randn(num_e, D, generator=gen, dtype=torch.float64).to(dtype),
            (torch.rand(num_e, generator=gen, dtype=torch.float64) + 0.5).to(dtype),
            torch.randn(n, OUT, generator=gen, dtype=torch.float64).to(dtype))


def _edge_kwargs(kind, e, ew):
    return {"gcn": {"edge_weight": ew}, "gat": {"edge_attr": e}, "stack": {"edge_attr": e}, "mgn": {"edge_attr": e}}.get(kind, {})


def _close(a, b, dtype, what):
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    err = (a - b).abs().max().item() if a.numel() else 0.0
    assert err <= tol * (1 + b.abs().max().item()), f"{what}: max abs error {err:.3g}"


def _check(rank, world, data_dir):
    import meshshard as ms
    from meshshard.distributed import CollectiveMismatchError, Shard
    from meshshard.models import global_mse_loss
    from meshshard.tensor import ShardTensor

    torch.set_num_threads(1)
    pos, ei = _mesh(data_dir)
    n, num_e = pos.shape[0], ei.shape[1]
    part = ms.partition(pos, world, method=METHODS[world], edge_index=ei, refine=False)
    graphs = {h: ms.ShardedGraph.from_partition(ei, part, halo_hops=h) for h in (1, 2)}
    checked = []
    for kind, dtype, hops, shard_input, global_edges in _cases(world):
        g = graphs[hops]
        x, e, ew, y = _inputs(n, num_e, dtype)
        what = f"{kind} {dtype} halo_hops={hops} rank {rank}/{world}"
        # reference: the unmodified model on the whole graph, one SGD step
        ref = _model(kind).to(dtype)
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        out_ref = ref(x, ei, **_edge_kwargs(kind, e, ew))
        torch.nn.functional.mse_loss(out_ref, y).backward()
        grads_ref = [p.grad.clone() for p in ref.parameters()]
        opt.step()
        # sharded
        model = _model(kind).to(dtype)
        dp = ms.DomainParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        owned = g.owned_ids
        xin = ShardTensor.from_local(x[owned], placements=[Shard(0)]) if shard_input else x[owned]
        e_in, ew_in = (e, ew) if global_edges else (e[g.edge_ids], ew[g.edge_ids])
        out = dp(xin, g, **_edge_kwargs(kind, e_in, ew_in))
        assert isinstance(out, ShardTensor) and list(out.shard_sizes()) == g.sizes, what
        _close(out.to_local().detach(), out_ref.detach()[owned], dtype, what + " output")
        global_mse_loss(out.to_local(), y[owned]).backward()
        for (name, p), gr in zip(model.named_parameters(), grads_ref):
            _close(p.grad, gr, dtype, f"{what} grad {name}")
        opt.step()
        for (name, p), pr in zip(model.named_parameters(), ref.parameters()):
            _close(p.detach(), pr.detach(), dtype, f"{what} {name} after one step")
        checked.append(kind)

    # no_sync: two local backwards, then a synced one, sum all three
    g = graphs[1]
    model = _model("sage").double()
    dp = ms.DomainParallel(model, g)
    x, e, ew, y = _inputs(n, num_e, torch.float64)
    with dp.no_sync():
        for _ in range(2):
            global_mse_loss(dp(x[g.owned_ids]).to_local(), y[g.owned_ids]).backward()
    global_mse_loss(dp(x[g.owned_ids]).to_local(), y[g.owned_ids]).backward()
    ref = _model("sage").double()
    torch.nn.functional.mse_loss(ref(x, ei), y).backward()
    for p, pr in zip(model.parameters(), ref.parameters()):
        _close(p.grad, 3 * pr.grad, torch.float64, "no_sync accumulation")
    # an evaluation call in between leaves the reduced gradients as they are: the next backward
    # adds one more (reduced) gradient, it does not sum the earlier ones over the ranks again
    with torch.no_grad():
        dp(x[g.owned_ids])
    global_mse_loss(dp(x[g.owned_ids]).to_local(), y[g.owned_ids]).backward()
    for p, pr in zip(model.parameters(), ref.parameters()):
        _close(p.grad, 4 * pr.grad, torch.float64, "accumulation after an evaluation call")

    if world == 4:
        _check_data_x_domain(rank, pos, ei)

    # refused layers
    from torch_geometric.nn import ChebConv
    from torch_geometric.nn.models import GCN

    with pytest.raises(ValueError, match="ChebConv.*out-degree"):
        ms.DomainParallel(torch.nn.ModuleList([ChebConv(F, F, K=2)]))
    bn = GCN(F, 8, 2, OUT, norm="batch_norm").double()
    with pytest.raises(ValueError, match="BatchNorm1d in training mode"):
        ms.DomainParallel(bn)(x[g.owned_ids], g)
    # the replica check names the first differing parameter, on every rank
    model = _model("gcn").double()
    if world > 1:
        if rank == world - 1:
            with torch.no_grad():
                model.convs[1].lin.weight[0, 0] += 1e-12
        with pytest.raises(CollectiveMismatchError, match=r"'convs.1.lin.weight' differs across ranks \(ranks \[%d\]"
                           % (world - 1)):
            ms.DomainParallel(model)
    return checked


def _check_data_x_domain(rank, pos, ei):
    """On a 2 x 2 ("data", "domain") mesh, each data group's domain pair shares one sample: the
    gradients (summed over all 4 ranks) of the two samples' losses, each scaled by 1/2, are those
    of their mean in one process; when group 1 has no sample and calls reduce_gradients(), the
    gradients are sample 0's alone."""
    import meshshard as ms
    from meshshard.distributed import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "domain"))
    data = mesh.get_local_rank("data")
    part = ms.partition(pos, 2, method="kdtree", edge_index=ei, refine=False)
    g = ms.ShardedGraph.from_partition(ei, part, group=mesh.get_group("domain"))
    x, e, _, y0 = _inputs(pos.shape[0], ei.shape[1], torch.float64)
    ys = [y0, y0.flip(0) * 2]  # two samples: the same graph and inputs, different targets
    ref = _model("mgn").double()
    out = ref(x, ei, edge_attr=e)
    grads_mean = torch.autograd.grad(sum(torch.nn.functional.mse_loss(out, y) for y in ys) / 2, list(ref.parameters()),
                                     retain_graph=True)
    grads_first = torch.autograd.grad(torch.nn.functional.mse_loss(out, ys[0]), list(ref.parameters()))
    dp = ms.DomainParallel(_model("mgn").double(), mesh=mesh)
    pred = dp(x[g.owned_ids], g, edge_attr=e)
    assert pred.device_mesh == mesh["domain"], "outputs live on the domain sub-mesh"
    (torch.nn.functional.mse_loss(pred.to_local(), ys[data][g.owned_ids], reduction="sum") / ys[data].numel() / 2).backward()
    for (name, p), gr in zip(dp.module.named_parameters(), grads_mean):
        _close(p.grad, gr, torch.float64, f"data x domain rank {rank}: mean of two samples, grad {name}")
    dp.zero_grad(set_to_none=True)
    if data == 0:
        (torch.nn.functional.mse_loss(dp(x[g.owned_ids], g, edge_attr=e).to_local(), ys[0][g.owned_ids],
                                      reduction="sum") / ys[0].numel()).backward()
    else:  # no sample: pairs with group 0's backward reductions
        dp.reduce_gradients()
    for (name, p), gr in zip(dp.module.named_parameters(), grads_first):
        _close(p.grad, gr, torch.float64, f"data x domain rank {rank}: group 1 without a sample, grad {name}")
    # a mesh of several dims is fine for ShardTensor models; a graph model needs to know its domain dim
    no_domain = ms.DomainParallel(_model("mgn"), mesh=init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp")))
    with pytest.raises(ValueError, match="needs a dim named 'domain'"):
        no_domain(x[g.owned_ids], g, edge_attr=e)


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_domain_parallel_equals_whole_graph(world, data_dir):
    results = run_distributed(_check, world_size=world, args=(data_dir,), timeout=TIMEOUT)
    assert all(r == [c[0] for c in _cases(world)] for r in results)


def test_wrap_errors_single_process():
    import meshshard as ms

    with pytest.raises(TypeError, match="wraps a torch.nn.Module"):
        ms.DomainParallel(lambda x: x)
    with pytest.raises(ValueError, match="exchange must be"):
        ms.DomainParallel(torch.nn.Linear(2, 2), exchange="never")
    with pytest.raises(TypeError, match="no ShardedGraph and no ShardTensor input"):
        ms.DomainParallel(torch.nn.Linear(2, 2))(torch.zeros(3, 2))
