"""max / min / amax / amin / argmax / argmin of a ShardTensor over the sharded dim on 1-4 gloo
ranks (uneven shards, a zero-row rank): values and GLOBAL indices equal torch's on the whole
tensor, including ties across ranks (first occurrence wins) and NaN, with and without dim /
keepdim; gradients (float64 1e-10, float32 1e-5); a fully Replicate ShardTensor runs any op
locally."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._ops._mesh2d import check_on_dp_domain_mesh

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 120
SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 4]}


def _close(a, b, what, tol=1e-10):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} vs {b.dtype}"
    if a.dtype.is_floating_point:
        assert torch.allclose(a, b, rtol=tol, atol=tol, equal_nan=True), f"{what}: {a} vs {b}"
    else:
        assert torch.equal(a, b), f"{what}: {a} vs {b}"


def _shard(full, mesh, sizes):
    c = mesh.get_local_rank(0)
    off = sum(sizes[:c])
    return full[off:off + sizes[c]]


def _rank_main(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    n = sum(sizes)
    g = torch.Generator().manual_seed(3)
    # small integers: many ties, across ranks too
    tied = torch.randint(0, 3, (n, 4), generator=g).double()
    nan = tied.clone()
    nan[5, 1] = float("nan")
    nan[2, 1] = float("nan")
    for name, full in [("ties", tied), ("nan", nan), ("int", tied.long())]:
        x = ShardTensor.from_local(_shard(full, mesh, sizes).clone(), mesh, (Shard(0),))
        for op in ("max", "min"):
            _close(getattr(x, op)().full_tensor(), getattr(full, op)(), f"{name} {op}()")
            for keepdim in (False, True):
                v, i = getattr(torch, op)(x, 0, keepdim=keepdim)
                rv, ri = getattr(torch, op)(full, 0, keepdim=keepdim)
                _close(v.full_tensor(), rv, f"{name} {op}(0, keepdim={keepdim}) values")
                _close(i.full_tensor(), ri, f"{name} {op}(0, keepdim={keepdim}) indices")
                v1, i1 = getattr(x, op)(dim=1, keepdim=keepdim)  # unsharded dim: local, stays sharded
                rv1, ri1 = getattr(full, op)(dim=1, keepdim=keepdim)
                _close(v1.full_tensor(), rv1, f"{name} {op}(dim=1) values")
                _close(i1.full_tensor(), ri1, f"{name} {op}(dim=1) indices")
            arg = "argmax" if op == "max" else "argmin"
            _close(getattr(x, arg)().full_tensor(), getattr(full, arg)(), f"{name} {arg}()")
            _close(getattr(torch, arg)(x, dim=0).full_tensor(), getattr(torch, arg)(full, dim=0), f"{name} {arg}(0)")
            _close(getattr(x, arg)(0, True).full_tensor(), getattr(full, arg)(0, True), f"{name} {arg}(0, True)")
            am = "amax" if op == "max" else "amin"
            _close(getattr(torch, am)(x, 0).full_tensor(), getattr(torch, am)(full, 0), f"{name} {am}(0)")
            _close(getattr(x, am)((0, 1), keepdim=True).full_tensor(), getattr(full, am)((0, 1), keepdim=True),
                   f"{name} {am}((0, 1))")
        _close(torch.max(x, x * 2).full_tensor(), torch.maximum(full, full * 2), f"{name} max(a, b)")

    # gradients (distinct values) against one process, float64 and float32
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        full = torch.randn(n, 4, generator=g).to(dtype)
        a = _shard(full, mesh, sizes).clone().requires_grad_()
        x = ShardTensor.from_local(a, mesh, (Shard(0),))
        loss = (x.max(0).values * torch.arange(4.0, dtype=dtype)).sum() + x.min() * 3 + x.amax(0).sum() * 0.5
        r = full.clone().requires_grad_()
        rloss = (r.max(0).values * torch.arange(4.0, dtype=dtype)).sum() + r.min() * 3 + r.amax(0).sum() * 0.5
        _close(loss.full_tensor(), rloss, f"{dtype} loss", tol)
        loss.backward()
        rloss.backward()
        _close(a.grad, _shard(r.grad, mesh, sizes), f"{dtype} gradient", tol)

    # a fully Replicate ShardTensor runs any op locally (values and gradients), rewrapped Replicate
    full = torch.randn(5, 3, generator=g, dtype=torch.float64)
    a = full.clone().requires_grad_()
    rep = ShardTensor.from_local(a, mesh, (Replicate(),))
    y = torch.cumsum(rep[1:, ::2], dim=0).reshape(-1)
    assert isinstance(y, ShardTensor) and y.placements == (Replicate(),)
    (y * y).sum().backward()
    r = full.clone().requires_grad_()
    (torch.cumsum(r[1:, ::2], dim=0).reshape(-1) ** 2).sum().backward()
    _close(a.grad, r.grad, "Replicate fallback gradient")
    try:
        x = ShardTensor.from_local(_shard(full, mesh, sizes).clone(), mesh, (Shard(0),))
        torch.cumsum(x, dim=0)
    except NotImplementedError as e:
        assert "cumsum" in str(e)
    else:
        raise AssertionError("cumsum of a sharded tensor must raise")
    if world == 4:  # on a 2 x 2 (dp, domain) mesh
        distinct = torch.randn(8, 3, generator=g, dtype=torch.float64)
        check_on_dp_domain_mesh("amax(0)", lambda t: t.amax(0), [distinct], [5, 3])
        check_on_dp_domain_mesh("max(dim=0).values", lambda t: t.max(dim=0).values, [distinct], [1, 7])
        check_on_dp_domain_mesh("argmin(0)", lambda t: t.argmin(0), [distinct.detach()], [4, 4])
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_extrema(world):
    assert run_distributed(_rank_main, world, timeout=TIMEOUT) == [True] * world


TWO_DIMS_EXTREMA = {
    "amax((2, 3))": lambda t: t.amax((2, 3)),
    "amin((0, 2, 3)) keepdim": lambda t: t.amin((0, 2, 3), keepdim=True),
    "amax(3)": lambda t: t.amax(3),
    "amax(1)": lambda t: t.amax(1),
    "max()": lambda t: t.max(),
    "min()": lambda t: t.min(),
    "argmax()": lambda t: t.argmax(),
    "argmin()": lambda t: t.argmin(),
    "max(2).values": lambda t: t.max(2).values,
    "max(2).indices": lambda t: t.max(2).indices,
    "min(3, keepdim).values": lambda t: t.min(3, keepdim=True).values,
    "min(3, keepdim).indices": lambda t: t.min(3, keepdim=True).indices,
    "argmax(3)": lambda t: t.argmax(3),
    "argmin(2, keepdim)": lambda t: t.argmin(2, keepdim=True),
    "max(1).values": lambda t: t.max(1).values,
    "argmax(1)": lambda t: t.argmax(1),
}


def _two_dims_extrema(rank, world):
    """Extrema of an image [2, 3, 9, 6] split in height and width: values, gradients and global
    indices; with many ties (small integers) the first occurrence wins as in torch."""
    from tests.tensor._ops._mesh2d import SPLIT_9_BY_6, check_split_in_two_dims

    g = torch.Generator().manual_seed(6)
    distinct = torch.randn(2, 3, 9, 6, generator=g, dtype=torch.float64)
    tied = torch.randint(0, 3, (2, 3, 9, 6), generator=g)
    done = 0
    for shape, s0, s1 in SPLIT_9_BY_6[world]:
        for i, (name, f) in enumerate(TWO_DIMS_EXTREMA.items()):
            check_split_in_two_dims(name, f, distinct, (), shape, (s0, s1), seed=i)
            check_split_in_two_dims(f"{name} with ties", f, tied, (), shape, (s0, s1))
            done += 2
    return done


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", [1, 3, 4])
def test_extrema_split_in_two_dims(world):
    from tests.tensor._ops._mesh2d import SPLIT_9_BY_6

    assert run_distributed(_two_dims_extrema, world, timeout=TIMEOUT) == [
        2 * len(TWO_DIMS_EXTREMA) * len(SPLIT_9_BY_6[world])] * world
