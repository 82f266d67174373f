"""``torch.compile`` and ``DomainParallel``: compiled runs equal eager ones (CPU inductor, float64).

At 1 and 2 gloo ranks, against the model on the whole input in one process (1e-10): the output,
the loss, every parameter gradient and the parameters after an Adam step, over two steps, for

* a Transolver on a point cloud split unevenly (ShardTensor inputs): ``torch.compile(dp)`` and
  ``DomainParallel(torch.compile(model))``; each ShardTensor op is a graph break run eagerly
  (``meshshard.tensor._compile``), the plain-tensor code between them compiles;
* GraphSAGE on a kNN graph (``dp(x, g)``): ``torch.compile(dp)`` runs the graph call eagerly;
  ``DomainParallel(torch.compile(model))`` on a graph is refused with the reason.
"""
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 900


def _close(a, b, what, tol=1e-10):
    err = float((a - b).abs().max())
    assert err <= tol * max(1.0, float(b.abs().max())), f"{what}: max error {err:.3e}"


def _check_steps(run, model, ref, x_ref, y_ref, what):
    """Two Adam steps of ``run()`` (sharded, returns (output as full tensor, loss)) equal the reference."""
    import torch.nn.functional as F

    opt, opt_ref = torch.optim.Adam(model.parameters(), lr=1e-2), torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(2):
        opt.zero_grad()
        opt_ref.zero_grad()
        out, loss = run()
        loss.backward()
        out_ref = ref(*x_ref)
        loss_ref = F.mse_loss(out_ref, y_ref)
        loss_ref.backward()
        _close(out, out_ref.detach(), f"{what} step {step}: output")
        _close(loss.full_tensor().detach(), loss_ref.detach(), f"{what} step {step}: loss")
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            _close(p.grad, q.grad, f"{what} step {step}: grad of {name}")
        opt.step()
        opt_ref.step()
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            _close(p.detach(), q.detach(), f"{what} step {step}: {name} after Adam")


def _point_model(rank, world, compile_inner):
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor
    from tests.ops._models import Transolver

    mesh = default_device_mesh()
    torch.manual_seed(0)
    model = Transolver(3, 2, depth=1).double()
    ref = copy.deepcopy(model)
    x, y = torch.randn(1, 23, 3, dtype=torch.float64), torch.randn(1, 23, 2, dtype=torch.float64)
    sizes = [15, 8] if world == 2 else [23]
    lo, n = sum(sizes[:rank]), sizes[rank]
    xs = ShardTensor.from_local(x[:, lo:lo + n].clone(), mesh, (Shard(1),), sharding_shapes="infer")
    ys = ShardTensor.from_local(y[:, lo:lo + n].clone(), mesh, (Shard(1),), sharding_shapes="infer")
    dp = ms.DomainParallel(torch.compile(model) if compile_inner else model)
    net = dp if compile_inner else torch.compile(dp)

    def run():
        out = net(xs)
        assert isinstance(out, ShardTensor)
        return out.full_tensor().detach(), F.mse_loss(out, ys)

    _check_steps(run, model, ref, (x,), y, f"Transolver, compile_inner={compile_inner}")


def _graph_model(rank, world):
    import copy

    import torch.nn.functional as F
    from torch_geometric.nn.models import GraphSAGE

    import meshshard as ms
    from meshshard.tensor import ShardTensor

    torch.manual_seed(1)
    n = 37
    pos = torch.rand(n, 2, dtype=torch.float64)
    nb = torch.cdist(pos, pos).topk(5, largest=False).indices[:, 1:]
    ei = torch.stack([nb.reshape(-1), torch.arange(n).repeat_interleave(4)])
    g = ms.ShardedGraph.from_partition(ei, ms.partition(pos, world, method="kdtree", edge_index=ei))
    x, y = torch.randn(n, 5, dtype=torch.float64), torch.randn(n, 2, dtype=torch.float64)
    model = GraphSAGE(5, 8, 2, 2).double()
    ref = copy.deepcopy(model)
    net = torch.compile(ms.DomainParallel(model))
    ys = ShardTensor.from_local(y[g.owned_ids])

    def run():
        out = net(x[g.owned_ids], g)
        full = torch.zeros(n, 2, dtype=torch.float64)
        full[g.owned_ids] = out.to_local().detach()
        full = ms.distributed.all_reduce(full) if world > 1 else full
        return full, F.mse_loss(out, ys)

    _check_steps(run, model, ref, (x, ei), y, "GraphSAGE, torch.compile(dp)")
    refused = ms.DomainParallel(torch.compile(copy.deepcopy(ref)))
    with pytest.raises(TypeError, match="graph model given as torch.compile"):
        refused(x[g.owned_ids], g)


def _rank_main(rank, world):
    import warnings

    warnings.simplefilter("ignore")
    _point_model(rank, world, compile_inner=False)
    _point_model(rank, world, compile_inner=True)
    _graph_model(rank, world)
    return True


@pytest.mark.parametrize("world", [1, 2])
def test_compiled_domain_parallel_equals_eager(world):
    assert run_distributed(_rank_main, world_size=world, timeout=TIMEOUT) == [True] * world
