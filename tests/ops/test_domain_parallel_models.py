"""Any model through ``DomainParallel``: grid and point-cloud models written as their authors write
them (``tests/ops/_models.py``, no meshshard call inside) equal one process on the whole input.

One spawned group per world size (1-4) runs every case: the output, the global loss, every
parameter's gradient after ``loss.backward()`` (no per-parameter handling: DomainParallel sums
every gradient once) and the parameters after one Adam step, in float64 (1e-10) and float32
(1e-5). Cases: a two-block Transolver on points of the DrivAer body split by a k-d tree partition
(uneven, its replicated slice tokens are what a "sum every gradient" convention got wrong), a 2-D
U-Net (BatchNorm in training mode, max pooling, transposed convolution, skip concatenation) on an
image split along its height, a 3-D U-Net (average pooling, trilinear upsampling) split along one
dim, gradient accumulation under ``no_sync`` and across steps, torch's own ``distribute_module``
on a ``Conv2d`` (DTensor parameters), and at 4 ranks a ``("data", "domain")`` mesh with two
Transolver samples. The split sizes are uneven and, at 4 ranks, one shard of the point cloud is
empty.
"""
import pytest
import torch

from meshshard.testing import run_distributed

TIMEOUT = 300


def _close(a, b, tol, what):
    scale = max(1.0, float(b.abs().max())) if b.numel() else 1.0
    err = float((a - b).abs().max()) if b.numel() else 0.0
    assert err <= tol * scale, f"{what}: max error {err:.3e} (scale {scale:.3e})"


def _points(data_dir, n, world, empty_last):
    """n DrivAer body points in k-d tree part order, and the part sizes (one part empty if asked)."""
    import numpy as np

    import meshshard as ms

    pts = np.load(data_dir / "drivaer_body_points.npz")["points"][::997][:n].astype(np.float64)
    pts = torch.as_tensor(pts)
    parts = world - 1 if empty_last and world > 1 else world
    part = ms.partition(pts, parts, method="kdtree")
    sizes = list(part.sizes) + ([0] if parts < world else [])
    return pts[part.perm], sizes


def _split(t, dim, sizes, rank):
    return t.narrow(dim, sum(sizes[:rank]), sizes[rank]).clone()


def _even_sizes(n, world):
    """Uneven split of n rows whose shards all have even sizes (pooling by 2 keeps boundaries)."""
    base = [2 * ((n // 2) // world + (1 if r < (n // 2) % world else 0)) for r in range(world)]
    return base[::-1]


def _train_step_matches(make_model, x, y, dim, sizes, rank, mesh, dtype, tol, what, steps=1):
    """One or more steps of model + MSE + Adam (SGD in float32) on ShardTensors equal the same on the whole tensors."""
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor

    torch.manual_seed(0)
    model = make_model().to(dtype)
    ref = copy.deepcopy(model)
    dp = ms.DomainParallel(model)
    # Adam's first steps move a weight by about lr * sign(gradient), so a float32 gradient component
    # near zero whose rounding differs flips the step: the float32 cases take an SGD step instead
    opt_type = torch.optim.Adam if dtype == torch.float64 else torch.optim.SGD
    opt, opt_ref = opt_type(model.parameters(), lr=1e-2), opt_type(ref.parameters(), lr=1e-2)
    x, y = x.to(dtype), y.to(dtype)
    xs = ShardTensor.from_local(_split(x, dim, sizes, rank), mesh, (Shard(dim),), sharding_shapes="infer")
    ys = ShardTensor.from_local(_split(y, dim, sizes, rank), mesh, (Shard(dim),), sharding_shapes="infer")
    for step in range(steps):
        out_ref = ref(x)
        loss_ref = F.mse_loss(out_ref, y)
        opt_ref.zero_grad()
        loss_ref.backward()
        out = dp(xs)
        loss = F.mse_loss(out, ys)
        opt.zero_grad()
        loss.backward()
        _close(out.full_tensor().detach(), out_ref.detach(), tol, f"{what} step {step}: output")
        _close(loss.full_tensor().detach(), loss_ref.detach(), tol, f"{what} step {step}: loss")
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            _close(p.grad, q.grad, tol, f"{what} step {step}: grad of {name}")
        opt.step()
        opt_ref.step()
        for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
            _close(p.detach(), q.detach(), tol, f"{what} step {step}: {name} after Adam")
        for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
            if b.is_floating_point():
                _close(b, c, tol, f"{what} step {step}: buffer {name}")


def _accumulation(data_dir, rank, world, mesh):
    """Two micro-batches under no_sync, then one synchronised: the sum of the three gradients."""
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor
    from tests.ops._models import Transolver

    pts, sizes = _points(data_dir, 60, world, empty_last=False)
    torch.manual_seed(1)
    model = Transolver(3, 2).double()
    ref = copy.deepcopy(model)
    dp = ms.DomainParallel(model)
    for i in range(3):
        x = (pts * (1 + 0.1 * i))[None]
        y = torch.sin(x[..., :2] * (i + 1))
        F.mse_loss(ref(x), y).backward()
        xs = ShardTensor.from_local(_split(x, 1, sizes, rank), mesh, (Shard(1),), sharding_shapes="infer")
        ys = ShardTensor.from_local(_split(y, 1, sizes, rank), mesh, (Shard(1),), sharding_shapes="infer")
        if i < 2:
            with dp.no_sync():
                F.mse_loss(dp(xs), ys).backward()
        else:
            F.mse_loss(dp(xs), ys).backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        _close(p.grad, q.grad, 1e-10, f"no_sync accumulation: grad of {name}")


def _distribute_module(rank, world, mesh):
    """The reference tutorial's conv example, verbatim apart from import names."""
    from torch.distributed.tensor import Shard, distribute_module

    from meshshard.tensor import scatter_tensor

    torch.manual_seed(0)
    original_tensor = torch.randn(1, 8, 20, 12, dtype=torch.float64, requires_grad=True)
    conv = torch.nn.Conv2d(8, 8, 3, stride=1, padding=1).double()
    single_output = conv(original_tensor)
    single_output.mean().backward()
    w_grad, b_grad = conv.weight.grad.clone(), conv.bias.grad.clone()
    conv.zero_grad()

    sharded_tensor = scatter_tensor(original_tensor.detach(), 0, mesh, placements=(Shard(2),), requires_grad=True)
    distributed_conv = distribute_module(conv, mesh)
    sharded_output = distributed_conv(sharded_tensor)
    sharded_output.mean().backward()

    _close(sharded_output.full_tensor().detach(), single_output.detach(), 1e-10, "distribute_module: output")
    _close(sharded_tensor.grad.full_tensor(), original_tensor.grad, 1e-10, "distribute_module: input grad")
    assert all(type(p).__name__ == "Replicate" for p in distributed_conv.weight.grad.placements)
    _close(distributed_conv.weight.grad.to_local(), w_grad, 1e-10, "distribute_module: weight grad")
    _close(distributed_conv.bias.grad.to_local(), b_grad, 1e-10, "distribute_module: bias grad")


def _data_domain(data_dir, rank):
    """4 ranks as 2 samples x 2 domain ranks: gradients of the two samples' mean loss."""
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor
    from tests.ops._models import Transolver

    mesh2d = ms.init_device_mesh("cpu", (2, 2), mesh_dim_names=("data", "domain"))
    pts, sizes = _points(data_dir, 50, 2, empty_last=False)
    torch.manual_seed(2)
    model = Transolver(3, 2).double()
    ref = copy.deepcopy(model)
    samples = [(pts[None] * s, torch.cos(pts[None, :, :2] * s)) for s in (1.0, 1.5)]
    for x, y in samples:
        (F.mse_loss(ref(x), y) / 2).backward()
    dp = ms.DomainParallel(model, mesh=mesh2d)
    data, dom = mesh2d.get_local_rank(0), mesh2d.get_local_rank(1)
    x, y = samples[data]
    domain = mesh2d["domain"]
    xs = ShardTensor.from_local(_split(x, 1, sizes, dom), domain, (Shard(1),), sharding_shapes="infer")
    ys = ShardTensor.from_local(_split(y, 1, sizes, dom), domain, (Shard(1),), sharding_shapes="infer")
    (F.mse_loss(dp(xs), ys) / 2).backward()
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        _close(p.grad, q.grad, 1e-10, f"data x domain: grad of {name}")


def _refusals(rank, world, mesh):
    import meshshard as ms
    from tests.ops._models import Transolver

    dp = ms.DomainParallel(Transolver(3, 2).double())
    with pytest.raises(TypeError, match="no ShardedGraph and no ShardTensor"):
        dp(torch.randn(1, 5, 3, dtype=torch.float64))


def _rank_main(rank, world, data_dir):
    import warnings

    from meshshard.distributed import default_device_mesh
    from tests.ops._models import Transolver, UNet2d, UNet3d

    warnings.simplefilter("ignore")
    mesh = default_device_mesh()
    pts, sizes = _points(data_dir, 70, world, empty_last=world == 4)
    x = pts[None]
    y = torch.stack([torch.sin(3 * pts[:, 0]) * pts[:, 1], pts[:, 2] ** 2], -1)[None]
    _train_step_matches(lambda: Transolver(3, 2), x, y, 1, sizes, rank, mesh, torch.float64, 1e-10,
                        "Transolver float64", steps=2)
    _train_step_matches(lambda: Transolver(3, 2), x, y, 1, sizes, rank, mesh, torch.float32, 1e-5,
                        "Transolver float32")
    torch.manual_seed(3)
    img, target = torch.randn(2, 2, 16, 10), torch.randn(2, 1, 16, 10)
    _train_step_matches(lambda: UNet2d(2, 1), img, target, 2, _even_sizes(16, world), rank, mesh, torch.float64,
                        1e-10, "2-D U-Net split in height", steps=2)
    vol, vtarget = torch.randn(1, 1, 8, 6, 4), torch.randn(1, 1, 8, 6, 4)
    _train_step_matches(lambda: UNet3d(1, 1), vol, vtarget, 2, _even_sizes(8, world), rank, mesh, torch.float64,
                        1e-10, "3-D U-Net split along depth")
    _accumulation(data_dir, rank, world, mesh)
    _distribute_module(rank, world, mesh)
    _refusals(rank, world, mesh)
    if world == 4:
        _data_domain(data_dir, rank)
    return True


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_models_through_domain_parallel_equal_one_process(world, data_dir):
    assert run_distributed(_rank_main, world_size=world, args=(data_dir,), timeout=TIMEOUT) == [True] * world
