"""index_add and scatter_add on ShardTensor at 1-4 gloo ranks with uneven shards (one rank holds no
row): edge messages summed into sharded target nodes (sources sharded or plain, indices sharded or
plain, ``alpha``, repeated targets), PyG's broadcast scatter index, the in-place variants, a
replicated target with sharded sources, row-wise along an unsharded dim; values and the gradients
of the target and the source against one process (float64 1e-10, float32 1e-5), and the refusals
(an element-wise scatter index, an out-of-range index on one rank only), raised on every rank."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

TIMEOUT = 240
NODES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 3]}        # target rows per rank
EDGES = {1: [11], 2: [6, 5], 3: [4, 0, 7], 4: [3, 3, 4, 1]}       # source rows per rank
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _checks(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(0)
    target = torch.tensor([3, 0, 6, 6, 1, 3, 5, 0, 2, 6, 3])  # 11 edges into 7 nodes, repeats
    nodes, edges = NODES[world], EDGES[world]

    def shard(full, sizes):
        off = sum(sizes[:rank])
        return full.narrow(0, off, sizes[rank]).clone()

    for dtype in (torch.float64, torch.float32):
        tol = TOL[dtype]
        x_full = torch.randn(7, 4, dtype=dtype, generator=g)
        m_full = torch.randn(11, 4, dtype=dtype, generator=g)
        w = torch.randn(7, 4, dtype=dtype, generator=g)

        def run(name, op, src_sharded, idx_kind, replicated_x=False):
            xr, mr = x_full.clone().requires_grad_(), m_full.clone().requires_grad_()
            ref = op(xr, target, mr)
            (ref * w).sum().backward()
            xl = (x_full if replicated_x else shard(x_full, nodes)).clone().requires_grad_()
            ml = (shard(m_full, edges) if src_sharded else m_full).clone().requires_grad_()
            xs = ShardTensor.from_local(xl, mesh, (Replicate(),)) if replicated_x else \
                ShardTensor.from_local(xl, mesh, (Shard(0),), sharding_shapes=list(nodes))
            ms = ShardTensor.from_local(ml, mesh, (Shard(0),), sharding_shapes=list(edges)) if src_sharded else ml
            idx = {"plain": target,
                   "sharded": ShardTensor.from_local(shard(target, edges), mesh, (Shard(0),),
                                                     sharding_shapes=list(edges))}[idx_kind]
            out = op(xs, idx, ms)
            full = out.full_tensor()
            assert torch.allclose(full, ref, **tol), f"{name} {dtype}: values differ by {(full - ref).abs().max()}"
            (full * w).sum().backward()
            want_x = xr.grad if replicated_x else shard(xr.grad, nodes)
            assert torch.allclose(xl.grad, want_x, **tol), f"{name} {dtype}: target gradient differs"
            want_m = shard(mr.grad, edges) if src_sharded else mr.grad
            have_m = ml.grad if ml.grad is not None else torch.zeros_like(ml)
            if not src_sharded:  # a plain source: each rank holds the share of the rows it added
                from meshshard.distributed import all_reduce
                have_m = all_reduce(have_m.clone())
            assert torch.allclose(have_m, want_m, **tol), f"{name} {dtype}: source gradient differs"

        add = lambda x, i, m: x.index_add(0, i, m)  # noqa: E731
        run("index_add, sharded source and index", add, True, "sharded")
        run("index_add, sharded source, plain index", add, True, "plain")
        run("index_add, plain source and index", add, False, "plain")
        run("torch.index_add alpha=2", lambda x, i, m: torch.index_add(x, 0, i, m, alpha=2.0), True, "sharded")
        run("index_add_ in place", lambda x, i, m: (x * 1).index_add_(0, i, m), True, "sharded")
        run("PyG scatter (broadcast index)",
            lambda x, i, m: x.scatter_add(0, i.view(-1, 1).expand_as(m), m), True, "sharded")
        run("scatter_add_ into zeros", lambda x, i, m: x + torch.zeros_like(x).scatter_add_(
            0, i.unsqueeze(-1).expand(-1, 4), m), True, "plain")
        run("replicated target, sharded source", add, True, "sharded", replicated_x=True)

        # along an unsharded dim, row by row: source laid out like the target
        xl = shard(x_full, nodes).clone().requires_grad_()
        xs = ShardTensor.from_local(xl, mesh, (Shard(0),), sharding_shapes=list(nodes))
        cols = torch.tensor([3, 0, 3])
        src = torch.randn(7, 3, dtype=dtype, generator=torch.Generator().manual_seed(3))
        ss = ShardTensor.from_local(shard(src, nodes), mesh, (Shard(0),), sharding_shapes=list(nodes))
        got = xs.index_add(1, cols, ss).full_tensor()
        ref = x_full.index_add(1, cols, src)
        assert torch.allclose(got, ref, **tol), f"index_add along dim 1 {dtype}"

    # refusals and errors, on every rank alike
    xs = ShardTensor.from_local(shard(x_full, nodes), mesh, (Shard(0),), sharding_shapes=list(nodes))
    ms = ShardTensor.from_local(shard(m_full, edges), mesh, (Shard(0),), sharding_shapes=list(edges))
    elementwise = torch.randint(0, 7, (11, 4), generator=torch.Generator().manual_seed(4))
    _expect(NotImplementedError, lambda: xs.scatter_add(0, elementwise, m_full), "scatter_add", "element-wise")
    bad = target.clone()
    bad[-1] = 7  # held by the last rank with edge rows only
    _expect(IndexError, lambda: xs.index_add(0, ShardTensor.from_local(
        shard(bad, edges), mesh, (Shard(0),), sharding_shapes=list(edges)), ms), "index_add", "out of range")
    return True


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_index_add_and_scatter_add(world):
    assert run_distributed(_checks, world, timeout=TIMEOUT - 20) == [True] * world
