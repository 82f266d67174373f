"""``repeat`` / ``tile`` on 1-4 gloo ranks, uneven shards with a zero-row rank, float64 1e-10 against
one process (values, layout, gradient): unsharded dims repeated, new leading dims moving the Shard
dim, a 2 x 2 dp x domain mesh at 4 ranks; repeating the sharded dim is refused by name."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect
from tests.tensor._ops._mesh2d import check_on_dp_domain_mesh

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}
CASES = [  # (name, op, the sharded dim of the result when the input is Shard(1))
    ("repeat(2, 1, 3)", lambda t: t.repeat(2, 1, 3), 1),
    ("repeat(2, 1, 1, 2)", lambda t: t.repeat(2, 1, 1, 2), 2),
    ("tile((2,))", lambda t: torch.tile(t, (2,)), 1),
    ("Tensor.tile(3, 1, 1, 1)", lambda t: t.tile(3, 1, 1, 1), 2),
]


def _check(rank, world):
    from meshshard.distributed import Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    off = sum(sizes[:rank])
    full = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for name, op, dim in CASES:
        local = full[:, off:off + sizes[rank]].clone().requires_grad_()
        ref_in = full.clone().requires_grad_()
        out = op(ShardTensor.from_local(local, mesh, (Shard(1),), sharding_shapes={0: sizes}))
        ref = op(ref_in)
        assert out.placements == (Shard(dim),) and out.shard_sizes() == sizes, f"{name}: {out.placements}"
        got = out.full_tensor()
        assert torch.allclose(got, ref, rtol=1e-10, atol=1e-10), name
        proj = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        (got * proj).sum().backward()
        (ref * proj).sum().backward()
        assert torch.allclose(local.grad, ref_in.grad[:, off:off + sizes[rank]], rtol=1e-10, atol=1e-10), name
    st = ShardTensor.from_local(full[:, off:off + sizes[rank]], mesh, (Shard(1),), sharding_shapes={0: sizes})
    _expect(NotImplementedError, lambda: st.repeat(1, 2, 1), "repeat", "sharded dim 1", "full_tensor")
    _expect(NotImplementedError, lambda: torch.tile(st, (2, 1)), "tile", "sharded dim 1")
    _expect(RuntimeError, lambda: st.repeat(2, 1), "can not be smaller")
    if world == 4:
        for name, op, _ in CASES:
            check_on_dp_domain_mesh(name, op, [full], [3, 2], dim=1)
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_repeat(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
