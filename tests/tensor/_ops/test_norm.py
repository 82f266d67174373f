"""Norms with global statistics on 1-4 gloo ranks, uneven shards with a zero-row rank: unmodified
``nn.BatchNorm1d/2d``, ``nn.GroupNorm``, ``nn.InstanceNorm1d``, ``nn.LayerNorm`` on ShardTensors
sharded on the batch or a spatial / points dim, against the same module in one process: values,
gradients of input, weight and bias (float64 1e-10, float32 1e-5), running statistics after two
training steps (equal on every rank and to one process), eval mode; clear errors otherwise."""
import copy

import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect
from tests.tensor._ops._mesh2d import check_on_dp_domain_mesh

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 4]}
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _rows(t, sizes, rank, dim):
    return t.narrow(dim, sum(sizes[:rank]), sizes[rank])


def _close(a, b, what, dtype=torch.float64):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL[dtype]), f"{what}: max diff {(a - b).abs().max().item()}"


def _module_case(rank, world, mesh, module, shape, dim, dtype=torch.float64, device="cpu"):
    """Two training steps and one eval step of ``module`` on a ``shape`` tensor sharded along
    ``dim`` (global size sum(SIZES[world]) there), vs a copy of the module in one process, both
    on ``device``."""
    from meshshard.distributed import Shard, all_reduce
    from meshshard.tensor import ShardTensor

    sizes = SIZES[world]
    torch.manual_seed(1)
    module = module.to(device=device, dtype=dtype)
    with torch.no_grad():
        for p in module.parameters():
            p.uniform_(0.5, 1.5)
    ref = copy.deepcopy(module)
    what = f"{type(module).__name__} {tuple(shape)} Shard({dim}) {dtype}"
    for step in range(3):
        train = step < 2
        module.train(train)
        ref.train(train)
        x = (torch.randn(shape, dtype=torch.float64) * 3 + step).to(device=device, dtype=dtype)
        gout = torch.randn(shape, dtype=dtype).to(device)
        xf = x.clone().requires_grad_()
        expected = ref(xf)
        (expected * gout).sum().backward()
        xl = _rows(x, sizes, rank, dim).clone().requires_grad_()
        out = module(ShardTensor.from_local(xl, mesh, (Shard(dim),), sharding_shapes={0: sizes}))
        assert out.placements == (Shard(dim),) and out.shard_sizes() == sizes, what
        (out.to_local() * _rows(gout, sizes, rank, dim)).sum().backward()
        _close(out.to_local(), _rows(expected.detach(), sizes, rank, dim), f"{what} step {step} output", dtype)
        _close(xl.grad, _rows(xf.grad, sizes, rank, dim), f"{what} step {step} input grad", dtype)
        for (name, p), r in zip(module.named_parameters(), ref.parameters()):
            # plain parameters hold this rank's partial sum (DDP convention: all-reduce them)
            _close(all_reduce(p.grad.clone()), r.grad, f"{what} step {step} {name} grad", dtype)
        module.zero_grad()
        ref.zero_grad()
    for (name, b), r in zip(module.named_buffers(), ref.buffers()):
        assert torch.allclose(b.double(), r.double(), **TOL[dtype]), f"{what} buffer {name}: {b} vs {r}"
    return [b.clone() for b in module.buffers()]


def _check(rank, world):
    from meshshard.distributed import Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    n = sum(SIZES[world])
    nn = torch.nn
    buffers = [
        _module_case(rank, world, mesh, nn.BatchNorm1d(3), (n, 3, 2), 0),                  # batch dim
        _module_case(rank, world, mesh, nn.BatchNorm1d(3), (n, 3, 2), 0, torch.float32),
        _module_case(rank, world, mesh, nn.BatchNorm1d(3, momentum=None), (2, 3, n), 2),   # points dim
        _module_case(rank, world, mesh, nn.BatchNorm2d(3), (2, 3, n, 2), 2),
        _module_case(rank, world, mesh, nn.InstanceNorm1d(3, affine=True, track_running_stats=True), (2, 3, n), 2),
        _module_case(rank, world, mesh, nn.InstanceNorm1d(3, affine=True, track_running_stats=True), (n, 3, 2), 0),
    ]
    _module_case(rank, world, mesh, nn.GroupNorm(2, 4), (2, 4, n, 2), 2)
    _module_case(rank, world, mesh, nn.GroupNorm(2, 4), (2, 4, n, 2), 2, torch.float32)
    _module_case(rank, world, mesh, nn.GroupNorm(2, 4), (n, 4, 3), 0)
    _module_case(rank, world, mesh, nn.LayerNorm([n, 3]), (2, n, 3), 1)                  # over the sharded dim
    _module_case(rank, world, mesh, nn.LayerNorm(3), (2, n, 3), 1)                       # features only

    x = ShardTensor.from_local(torch.randn(2, SIZES[world][rank], 4), mesh, (Shard(1),),
                               sharding_shapes={0: SIZES[world]})
    if world == 4:  # on a 2 x 2 (dp, domain) mesh
        g = torch.Generator().manual_seed(11)
        pts = torch.randn(2, 4, 9, generator=g, dtype=torch.float64)
        check_on_dp_domain_mesh("batch_norm", lambda t: F.batch_norm(t, None, None, training=True), [pts], [3, 6], dim=2)
        check_on_dp_domain_mesh("group_norm", lambda t: F.group_norm(t, 2), [pts], [9, 0], dim=2)
        check_on_dp_domain_mesh("layer_norm over the points", lambda t: F.layer_norm(t, (4, 9)), [pts], [5, 4], dim=2)
    _expect(NotImplementedError, lambda: F.batch_norm(x, None, None, training=True), "channel dim 1")
    _expect(ValueError, lambda: F.group_norm(x.transpose(1, 2), 3), "divisible")
    return buffers


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_norms_with_global_statistics(world):
    results = run_distributed(_check, world, timeout=TIMEOUT)
    for buffers in results[1:]:  # running statistics identical on every rank
        for case0, case in zip(results[0], buffers):
            for a, b in zip(case0, case):
                assert torch.equal(a, b)


# Norms of a tensor split along two dims by a 2-D mesh: (mesh shape, rows along the first split
# dim, along the second), uneven, with an empty shard.
TWO_DIMS = {1: [((1, 1), (9,), (6,))], 3: [((1, 3), (9,), (2, 0, 4)), ((3, 1), (2, 1, 6), (6,))],
            4: [((2, 2), (3, 6), (5, 1)), ((2, 2), (9, 0), (4, 2))]}


def _two_dims(rank, world):
    """Two training steps and one eval step of each module on an image split in height and width
    (and a sequence split in batch and length): values, input and parameter gradients, running
    statistics equal to one process."""
    from meshshard.distributed import all_reduce, validation
    from meshshard.tensor import ShardTensor
    from tests.tensor._ops._mesh2d import check_split_in_two_dims

    nn = torch.nn
    cases = [(nn.BatchNorm2d(4), (2, 4, 9, 6), (2, 3)), (nn.BatchNorm2d(4, momentum=None), (2, 4, 9, 6), (2, 3)),
             (nn.InstanceNorm2d(4, affine=True, track_running_stats=True), (2, 4, 9, 6), (2, 3)),
             (nn.GroupNorm(2, 4), (2, 4, 9, 6), (2, 3)), (nn.LayerNorm([9, 6]), (2, 4, 9, 6), (2, 3)),
             (nn.LayerNorm([4, 9, 6]), (2, 4, 9, 6), (2, 3)), (nn.LayerNorm(6), (9, 4, 6), (0, 2)),
             (nn.BatchNorm1d(4), (9, 4, 6), (0, 2)),
             (nn.InstanceNorm1d(4, affine=True, track_running_stats=True), (9, 4, 6), (0, 2)),
             (nn.GroupNorm(2, 4), (9, 4, 6), (0, 2))]
    done = 0
    with validation(False):
        for shape, s0, s1 in TWO_DIMS[world]:
            for module, full_shape, dims in cases:
                torch.manual_seed(1)
                module = module.double()
                with torch.no_grad():
                    for p in module.parameters():
                        p.uniform_(0.5, 1.5)
                ref = copy.deepcopy(module)
                what = f"{type(module).__name__} {full_shape} split {dims} on {shape} {s0}x{s1}"
                for step in range(3):
                    module.train(step < 2)
                    ref.train(step < 2)
                    x = torch.randn(full_shape, generator=torch.Generator().manual_seed(step), dtype=torch.float64) * 3
                    check_split_in_two_dims(f"{what} step {step}",
                                            lambda t: (module if isinstance(t, ShardTensor) else ref)(t),
                                            x + step, (), shape, (s0, s1), dims, seed=step)
                    for (name, p), r in zip(module.named_parameters(), ref.parameters()):
                        _close(all_reduce(p.grad.clone()), r.grad, f"{what} step {step} {name} grad")
                    module.zero_grad()
                    ref.zero_grad()
                for (name, b), r in zip(module.named_buffers(), ref.buffers()):
                    assert torch.allclose(b.double(), r.double(), **TOL[torch.float64]), f"{what} buffer {name}"
                done += 1
    return done


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", sorted(TWO_DIMS))
def test_norms_split_in_two_dims(world):
    assert run_distributed(_two_dims, world, timeout=TIMEOUT - 20) == [10 * len(TWO_DIMS[world])] * world
