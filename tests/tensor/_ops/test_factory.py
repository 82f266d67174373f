"""``new_*`` and ``*_like`` of ShardTensors on 1-4 gloo ranks, uneven shards with a zero-row rank:
the layout each one takes (``new_*`` of the global shape keeps a sharded layout, any other size is
Replicate; ``*_like`` keeps the layout, Partial becoming Replicate), the values against one process,
dtype / ``requires_grad`` keywords (a leaf that takes gradients), random draws that agree along
replicated mesh dims (a 2 x 2 dp x domain mesh at 4 ranks), and refusals by name."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}


def _check(rank, world):
    from meshshard.distributed import Partial, Replicate, Shard, all_gather_object, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    x = ShardTensor.from_local(torch.randn(sizes[rank], 3, dtype=torch.float64), mesh, (Shard(0),),
                               sharding_shapes={0: sizes})
    # new_* of the global shape: x's layout; of another shape: Replicate, the whole tensor everywhere
    for make, want in [(lambda: x.new_zeros(5, 3), torch.zeros(5, 3)), (lambda: x.new_ones((5, 3)), torch.ones(5, 3)),
                       (lambda: x.new_full((5, 3), 4.0), torch.full((5, 3), 4.0)),
                       (lambda: x.new_zeros(size=(5, 3)), torch.zeros(5, 3))]:
        out = make()
        assert out.placements == (Shard(0),) and out.shard_sizes() == sizes and out.dtype == torch.float64
        assert torch.equal(out.full_tensor(), want.double())
    for out, want in [(x.new_zeros(2), torch.zeros(2, dtype=torch.float64)),
                      (x.new_ones(3, 5), torch.ones(3, 5, dtype=torch.float64)),
                      (x.new_full([1], 2, dtype=torch.int64), torch.full([1], 2)),
                      (x.new_tensor([[1.0, 2.0]]), torch.tensor([[1.0, 2.0]], dtype=torch.float64)),
                      (x.new_empty(4, 1), None)]:
        assert out.placements == (Replicate(),), out.placements
        if want is not None:
            assert out.dtype == want.dtype and torch.equal(out.to_local(), want), (out, want)
        else:
            assert out.to_local().shape == (4, 1) and out.dtype == torch.float64
    # a new leaf that requires grad takes gradients like any ShardTensor
    w = x.new_ones(5, 3, requires_grad=True)
    assert w.is_leaf and w.requires_grad
    (w * x).sum().backward()
    assert w.grad.placements == (Shard(0),)
    assert torch.allclose(w.grad.full_tensor(), x.full_tensor())
    # *_like: x's layout (dtype keywords honoured)
    for fn, value in [(torch.zeros_like, 0.0), (torch.ones_like, 1.0), (lambda t: torch.full_like(t, 3.5), 3.5)]:
        out = fn(x)
        assert out.placements == (Shard(0),) and out.shard_sizes() == sizes
        assert torch.equal(out.full_tensor(), torch.full((5, 3), value, dtype=torch.float64))
    assert torch.ones_like(x, dtype=torch.float32).dtype == torch.float32
    r = torch.rand_like(x)
    assert r.placements == (Shard(0),) and bool(((r.to_local() >= 0) & (r.to_local() < 1)).all())
    ri = torch.randint_like(x, 3, 7)
    assert ri.dtype == torch.float64 and bool(((ri.full_tensor() >= 3) & (ri.full_tensor() < 7)).all())
    # Partial -> Replicate: ones_like of a Partial tensor is ones, not world * ones
    part = ShardTensor.from_local(torch.randn(2, 2), mesh, (Partial(),))
    ones = torch.ones_like(part)
    assert ones.placements == (Replicate(),) and torch.equal(ones.full_tensor(), torch.ones(2, 2))
    assert part.new_zeros(2, 2).placements == (Replicate(),)
    # random draws on replicated data agree on every rank
    rep = ShardTensor.from_local(torch.zeros(3, 2), mesh, (Replicate(),))
    draws = all_gather_object(torch.randn_like(rep).to_local().tolist())
    assert all(d == draws[0] for d in draws), "randn_like of a replicated tensor differs between ranks"

    _expect(NotImplementedError, lambda: x.new_tensor(x), "new_tensor", "clone")
    _expect(NotImplementedError, lambda: x.new_empty_strided((2,), (1,)), "new_empty_strided")

    if world == 4:  # dp x domain: the domain shards are drawn once and agree over dp
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
        dom = [1, 3]
        y = ShardTensor.from_local(torch.zeros(dom[mesh2.get_local_rank(1)], 2), mesh2, (Replicate(), Shard(0)),
                                   sharding_shapes={1: dom})
        full = torch.rand_like(y).full_tensor()
        fulls = all_gather_object(full.tolist())
        assert all(f == fulls[0] for f in fulls), "rand_like over dp x domain differs between dp replicas"
        z = y.new_zeros(4, 2)
        assert z.placements == (Replicate(), Shard(0)) and z.shard_sizes() == dom
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_factories(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
