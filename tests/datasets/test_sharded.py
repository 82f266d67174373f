"""ShardedMeshDataset on any number of ranks: a dataset preprocessed into K = 2 or 4 parts trains
through DomainParallel on W = 1, 2, 3 ranks (parts merged or split on load) with the loss and
gradients of one process on the whole mesh (float64, 1e-10), two optimizer steps."""
import pytest
import torch

from meshshard.testing import run_distributed

STEPS = 2


def _train(model, x, graph_or_edges, e, y):
    """Two Adam steps of ``model(x, graph_or_edges, e)``: the loss and the flat gradient of each step."""
    import torch.nn.functional as F

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    out = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x, graph_or_edges, e), y)
        loss.backward()
        value = loss.to_local() if hasattr(loss, "to_local") else loss
        out.append((float(value.detach()), torch.cat([p.grad.reshape(-1) for p in model.parameters()]).clone()))
        opt.step()
    return out


def _sharded(rank, world, roots):
    from meshshard import DomainParallel
    from meshshard.datasets import ShardedMeshDataset
    from meshshard.models import MeshGraphNet

    res = {}
    for k, root in roots.items():
        ds = ShardedMeshDataset(root, dtype=torch.float64)
        s = ds[0]
        assert s.graph.world_size == world and s.x.shape[0] == sum(s.graph.sizes)
        x, e, y = ds.model_inputs(s)
        torch.manual_seed(0)
        net = MeshGraphNet(ds.num_node_features, ds.num_edge_features, ds.num_targets, hidden=8, num_layers=2).double()
        res[k] = _train(DomainParallel(net), x, s.graph, e, y)
    return res


@pytest.fixture(scope="module")
def roots(tmp_path_factory, data_dir):
    from meshshard.datasets import preprocess_dataset

    tmp = tmp_path_factory.mktemp("any_ranks")
    out = {}
    for k in (2, 4):  # halo depth 2 = the model's layers: one exchange per forward
        preprocess_dataset([data_dir / "naca0012_inviscid.su2"], tmp / f"k{k}", k, ["pos"], ["pos[1]"], dtype="float64",
                           halo_hops=2, method="graph", progress=False)
        out[k] = tmp / f"k{k}"
    return out


@pytest.mark.timeout(300)
def test_any_number_of_ranks_trains_like_one_process(roots, data_dir):
    from meshshard.datasets import MeshDataset, ShardedMeshDataset
    from meshshard.models import MeshGraphNet

    ref_ds = ShardedMeshDataset(roots[2])  # one process: both parts merged on load
    full = MeshDataset([data_dir / "naca0012_inviscid.su2"], ["pos"], ["pos[1]"], node_types=ref_ds.node_types,
                       stats=ref_ds.stats, dtype=torch.float64)
    d = full[0]
    x, e, y = full.model_inputs(d)
    torch.manual_seed(0)
    net = MeshGraphNet(x.shape[1], e.shape[1], y.shape[1], hidden=8, num_layers=2).double()
    ref = _train(net, x, d.edge_index, e, y)
    assert ref[0][0] != ref[1][0]  # the step changed the weights
    results = {1: [_sharded(0, 1, roots)]}
    for world in (2, 3):
        results[world] = run_distributed(_sharded, world, args=(roots,), timeout=280)
    for world, per_rank in results.items():
        for res in per_rank:
            for k, steps in res.items():
                for (loss, grad), (ref_loss, ref_grad) in zip(steps, ref):
                    assert abs(loss - ref_loss) <= 1e-10 * abs(ref_loss), (world, k, loss, ref_loss)
                    assert float((grad - ref_grad).abs().max()) <= 1e-10 * float(ref_grad.abs().max()), (world, k)
