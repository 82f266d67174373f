"""torch.einsum on ShardTensors sharded along one index, 3 gloo ranks with an empty shard: the
sharded index kept (result sharded along it) or summed over (replicated result), plain and
replicated operands along the sharded index, values and gradients vs one process (float64 1e-10);
clear errors for operands sharded along different indices."""
import torch

from meshshard.testing import run_distributed

SIZES = [2, 0, 5]
TOL = dict(rtol=1e-10, atol=1e-10)


def _rows(t, dim, rank):
    return t.narrow(dim, sum(SIZES[:rank]), SIZES[rank])


def _check(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    g = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    x = torch.randn(2, n, 3, generator=g, dtype=torch.float64)
    w = torch.randn(2, n, 4, generator=g, dtype=torch.float64)
    m = torch.randn(3, 4, generator=g, dtype=torch.float64)
    p = torch.randn(n, generator=g, dtype=torch.float64)
    xf, wf, mf = (t.clone().requires_grad_() for t in (x, w, m))
    kept = torch.einsum("bnc,cg,n->bng", xf, mf, p)
    summed = torch.einsum("bnc,bng->bcg", xf, wf)
    ((kept ** 2).sum() + (summed ** 3).sum()).backward()

    xl, wl = (_rows(t, 1, rank).clone().requires_grad_() for t in (x, w))
    ml = m.clone().requires_grad_()
    sx, sw = (ShardTensor.from_local(t, mesh, (Shard(1),), sharding_shapes={0: SIZES}) for t in (xl, wl))
    sm = ShardTensor.from_local(ml, mesh, (Replicate(),))
    k = torch.einsum("bnc,cg,n->bng", sx, sm, p)       # replicated weight, plain global-size vector
    s = torch.einsum("bnc,bng->bcg", sx, sw)           # contracted over the sharded points
    assert k.placements == (Shard(1),) and s.placements == (Replicate(),)
    ((k.to_local() ** 2).sum() + (s.to_local() ** 3).sum()).backward()
    assert torch.allclose(k.to_local(), _rows(kept.detach(), 1, rank), **TOL)
    assert torch.allclose(s.to_local(), summed.detach(), **TOL)
    assert torch.allclose(xl.grad, _rows(xf.grad, 1, rank), **TOL)
    assert torch.allclose(wl.grad, _rows(wf.grad, 1, rank), **TOL)
    assert torch.allclose(ml.grad, mf.grad, **TOL)  # a replicated ShardTensor's gradient is summed
    try:
        torch.einsum("bnc,bmc->bnm", sx, sx)  # all pairs of points: would need the other ranks' rows
    except NotImplementedError as e:
        assert "sharded along index" in str(e)
    else:
        raise AssertionError("einsum over operands sharded along different indices must raise")
    return True


def test_einsum_over_a_sharded_index():
    assert run_distributed(_check, 3, timeout=120) == [True] * 3
