"""FSDP2 (``fully_shard``) composed with domain sharding through ``DomainParallel``: parameters
sharded over the data ranks of a ``("data", "domain")`` mesh (or over the domain ranks
themselves), activations over the domain ranks. Against one process on the whole samples: every
gradient shard, the parameters after one Adam step, ``no_sync`` accumulation, and a distributed
checkpoint (``torch.distributed.checkpoint``) that resumes to the same loss. A Transolver (a
parameter acting on replicated slice tokens, the case the gradient rule exists for) on an uneven
split of a point cloud, float64 1e-10 and float32 1e-5."""
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 300
N = 29


def _setup(world, dtype, data):
    """(mesh or None, data coordinate, domain coordinate, domain sizes, samples x and y)."""
    import meshshard as ms
    from meshshard.distributed import get_rank

    D = data
    P = world // D
    mesh = ms.init_device_mesh("cpu", (D, P), mesh_dim_names=("data", "domain")) if D > 1 else None
    d, p = (mesh.get_coordinate() if mesh is not None else (0, get_rank()))
    sizes = {1: [N], 2: [20, 9], 3: [5, 16, 8]}[P]
    g = torch.Generator().manual_seed(1)
    x = torch.randn(D, 1, N, 3, generator=g).to(dtype)
    y = torch.randn(D, 1, N, 2, generator=g).to(dtype)
    return mesh, d, p, sizes, x, y


def _shard(t, mesh, p, sizes):
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor

    lo = sum(sizes[:p])
    dmesh = mesh["domain"] if mesh is not None else default_device_mesh()
    return ShardTensor.from_local(t[:, lo:lo + sizes[p]].clone(), dmesh, (Shard(1),), sharding_shapes="infer")


def _fsdp_model(template, mesh):
    import copy

    from torch.distributed.fsdp import fully_shard

    from meshshard.distributed import default_device_mesh

    model = copy.deepcopy(template)
    fmesh = mesh["data"] if mesh is not None else default_device_mesh()
    for block in model.blocks:
        fully_shard(block, mesh=fmesh)
    return fully_shard(model, mesh=fmesh)


def _gradients_and_step(rank, world, data, dtype_name):
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from tests.ops._models import Transolver

    dtype = getattr(torch, dtype_name)
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    mesh, d, p, sizes, x, y = _setup(world, dtype, data)
    torch.manual_seed(0)
    template = Transolver(3, 2).to(dtype)

    ref = copy.deepcopy(template)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    ref_loss = sum(F.mse_loss(ref(x[i]), y[i]) for i in range(data))
    ref_loss.backward()

    dp = ms.DomainParallel(_fsdp_model(template, mesh), mesh=mesh)
    opt = torch.optim.Adam(dp.parameters(), lr=1e-2)
    loss = F.mse_loss(dp(_shard(x[d], mesh, p, sizes)), _shard(y[d], mesh, p, sizes))
    loss.backward()

    def close(a, b):
        return float((a - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))

    named_ref = dict(ref.named_parameters())
    bad = [n for n, q in dp.module.named_parameters() if not close(q.grad.full_tensor(), named_ref[n].grad)]
    assert not bad, f"gradients differ from one process: {bad}"
    opt.step()
    ref_opt.step()
    bad = [n for n, q in dp.module.named_parameters() if not close(q.full_tensor(), named_ref[n])]
    assert not bad, f"parameters after one Adam step differ from one process: {bad}"
    return True


@pytest.mark.parametrize("world,data,dtype", [
    (1, 1, "float64"), (2, 1, "float64"), (3, 1, "float64"), (2, 1, "float32"),
    (4, 2, "float64"), (4, 2, "float32"), (2, 2, "float64")])
def test_fsdp2_gradients_and_adam_step_equal_one_process(world, data, dtype):
    assert run_distributed(_gradients_and_step, world_size=world, args=(data, dtype),
                           timeout=TIMEOUT) == [True] * world


def _no_sync_accumulates(rank, world):
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from tests.ops._models import Transolver

    mesh, d, p, sizes, x, y = _setup(world, torch.float64, 2)
    torch.manual_seed(0)
    template = Transolver(3, 2).double()
    ref = copy.deepcopy(template)
    for scale in (1.0, 1.3):
        sum(F.mse_loss(ref(x[i] * scale), y[i]) for i in range(2)).backward()

    dp = ms.DomainParallel(_fsdp_model(template, mesh), mesh=mesh)
    xs, ys = _shard(x[d], mesh, p, sizes), _shard(y[d], mesh, p, sizes)
    with dp.no_sync():
        F.mse_loss(dp(xs * 1.0), ys).backward()
    F.mse_loss(dp(xs * 1.3), ys).backward()
    named_ref = dict(ref.named_parameters())
    for n, q in dp.module.named_parameters():
        err = float((q.grad.full_tensor() - named_ref[n].grad).abs().max())
        assert err <= 1e-10, f"{n}: accumulated gradient off by {err}"
    with pytest.raises(RuntimeError, match="FSDP2"):
        dp.reduce_gradients()
    return True


def test_fsdp2_no_sync_accumulates_then_sums_once():
    assert run_distributed(_no_sync_accumulates, world_size=4, timeout=TIMEOUT) == [True] * 4


def _checkpoint_resumes(rank, world, path):
    import meshshard as ms
    from tests.ops._models import Transolver
    from tests.ops.test_domain_parallel_checkpoint import check_resume

    mesh, d, p, sizes, x, y = _setup(world, torch.float64, 2)
    check_resume(lambda: ms.DomainParallel(_fsdp_model(Transolver(3, 2).double(), mesh), mesh=mesh),
                 _shard(x[d], mesh, p, sizes), _shard(y[d], mesh, p, sizes), path, whole=lambda t: t.full_tensor())
    return True


def test_fsdp2_distributed_checkpoint_resumes_to_the_same_loss(tmp_path):
    assert run_distributed(_checkpoint_resumes, world_size=4, args=(str(tmp_path / "ckpt"),),
                           timeout=TIMEOUT) == [True] * 4


def _refusals(rank, world):
    from torch.distributed.fsdp import fully_shard

    import meshshard as ms
    from tests.ops._models import Transolver

    mesh2d = ms.init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "domain"))
    torch.manual_seed(0)
    model = fully_shard(Transolver(3, 2).double(), mesh=mesh2d["data"])
    # the domain sum would be missing: DomainParallel must know the 2-D mesh
    with pytest.raises(ValueError, match="FSDP2.*2 ranks.*summed over 4"):
        ms.DomainParallel(model)
    with pytest.raises(ValueError, match="not a sub-mesh"):
        ms.DomainParallel(model, mesh=ms.init_device_mesh("cpu", (2, 2), mesh_dim_names=("samples", "parts")))
    return True


def test_fsdp2_over_a_mesh_domain_parallel_cannot_sum_is_refused():
    assert run_distributed(_refusals, world_size=4, timeout=TIMEOUT) == [True] * 4


def _graph_model(rank, world, pos, ei):
    """A MeshGraphNet called as ``dp(x, g, edge_attr=e)``, FSDP2 over the data dim of a 2 x 2 mesh:
    each data group's sample (same graph, other targets) summed, as in one process."""
    import copy

    from torch.distributed.fsdp import fully_shard

    import meshshard as ms
    from tests.ops.test_domain_parallel import _inputs, _model

    mesh = ms.init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "domain"))
    data = mesh.get_local_rank("data")
    part = ms.partition(pos, 2, method="kdtree", edge_index=ei, refine=False)
    g = ms.ShardedGraph.from_partition(ei, part, group=mesh.get_group("domain"))
    x, e, _, y0 = _inputs(pos.shape[0], ei.shape[1], torch.float64)
    ys = [y0, y0.flip(0) * 2]
    torch.manual_seed(0)
    template = _model("mgn").double()
    ref = copy.deepcopy(template)
    out = ref(x, ei, edge_attr=e)
    sum(torch.nn.functional.mse_loss(out, y, reduction="sum") for y in ys).backward()
    dp = ms.DomainParallel(fully_shard(copy.deepcopy(template), mesh=mesh["data"]), mesh=mesh)
    pred = dp(x[g.owned_ids], g, edge_attr=e)
    torch.nn.functional.mse_loss(pred.to_local(), ys[data][g.owned_ids], reduction="sum").backward()
    named_ref = dict(ref.named_parameters())
    for n, q in dp.module.named_parameters():
        r = named_ref[n].grad
        err = float((q.grad.full_tensor() - r).abs().max())
        assert err <= 1e-10 * max(1.0, float(r.abs().max())), f"{n}: gradient off by {err}"
    return True


def test_fsdp2_graph_model_data_x_domain(data_dir):
    from tests.ops.test_domain_parallel import _mesh

    pos, ei = _mesh(data_dir)
    assert run_distributed(_graph_model, world_size=4, args=(pos, ei), timeout=TIMEOUT) == [True] * 4
