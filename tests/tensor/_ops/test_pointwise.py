"""Element-wise ops between operands of different layouts on 1-4 gloo ranks, uneven shards with a
zero-row rank, float64 1e-10 against one process (values and the gradients of every operand):
pairwise differences ``x[:, None] - y[None, :]`` of two sharded point sets (DTensor's rule: the
cheaper side is gathered, the other keeps its sharding; on a tie the first operand keeps it),
operands of different ndim sharded alike, ``where`` / ``masked_fill`` / ``clamp`` with operands
sharded on different dims; casts that read a plain tensor's dtype only; ``clone`` of a Partial
tensor staying Partial; operands sharding the same dim with other boundaries (rebalanced); refusals (``where(condition)``)."""
import warnings

import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
N_SIZES = {1: [6], 2: [0, 6], 3: [2, 0, 4], 4: [1, 2, 0, 3]}
M_SIZES = {1: [4], 2: [3, 1], 3: [0, 3, 1], 4: [1, 1, 2, 0]}
TOL = dict(rtol=1e-10, atol=1e-10)


def _rows(t, sizes, rank, dim=0):
    return t.narrow(dim, sum(sizes[:rank]), sizes[rank])


def _close(a, b, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL), f"{what}: max diff {(a - b).abs().max().item()}"


def _pair_case(rank, mesh, name, op, fulls, layouts, keeps):
    """``op(*operands)`` on ShardTensors with ``layouts`` = [(placements, sizes or None)] against one
    process; the result must keep the layout of operand ``keeps``; every operand's gradient exact."""
    from meshshard.tensor import ShardTensor

    refs = [f.clone().requires_grad_() for f in fulls]
    locals_, sts = [], []
    for f, (placements, sizes, dim) in zip(fulls, layouts):
        local = (f if sizes is None else _rows(f, sizes, rank, dim)).clone().requires_grad_()
        locals_.append(local)
        sts.append(ShardTensor.from_local(local, mesh, placements, sharding_shapes="infer" if sizes is None
                                          else {0: sizes}))
    out, ref = op(*sts), op(*refs)
    full = out.full_tensor()
    _close(full, ref.detach(), f"{name} value")
    kept = layouts[keeps]
    assert out.shard_sizes() == kept[1], f"{name}: shard sizes {out.shard_sizes()} vs {kept[1]}"
    proj = torch.randn(ref.shape, generator=torch.Generator().manual_seed(3), dtype=ref.dtype)
    (full * proj).sum().backward()
    (ref * proj).sum().backward()
    for i, (local, r, (placements, sizes, dim)) in enumerate(zip(locals_, refs, layouts)):
        want = r.grad if sizes is None else _rows(r.grad, sizes, rank, dim)
        _close(local.grad, want, f"{name} gradient of operand {i}")
    return out


def _check(rank, world):
    from meshshard.distributed import Partial, Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor, promotion

    mesh = init_device_mesh("cpu", (world,))
    ns, ms_ = N_SIZES[world], M_SIZES[world]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(sum(ns), 3, generator=g, dtype=torch.float64)   # N = 6 points
    y = torch.randn(sum(ms_), 3, generator=g, dtype=torch.float64)  # M = 4 points
    sx, sy = ((Shard(0),), ns, 0), ((Shard(0),), ms_, 0)

    # pairwise differences: x has more bytes, so y is gathered and the result keeps x's rows
    out = _pair_case(rank, mesh, "x[:, None] - y[None, :]", lambda a, b: a[:, None] - b[None, :], [x, y], [sx, sy], 0)
    assert out.placements == (Shard(0),) and tuple(out.shape) == (6, 4, 3)
    # ... and in the other order the larger x keeps its sharding along dim 1
    out = _pair_case(rank, mesh, "y[:, None] - x[None, :]", lambda b, a: b[:, None] - a[None, :], [y, x], [sy, sx], 1)
    assert out.placements == (Shard(1),)
    # a squared distance matrix, with a broadcast over the feature dim too
    _pair_case(rank, mesh, "squared distances", lambda a, b: ((a[:, None] - b[None, :]) ** 2).sum(-1), [x, y],
               [sx, sy], 0)
    # a tie in bytes: the first operand keeps its sharding
    y6 = torch.randn(sum(ns), 3, generator=g, dtype=torch.float64)
    out = _pair_case(rank, mesh, "tie", lambda a, b: a[:, None] * b[None, :], [x, y6], [sx, sx], 0)
    assert out.placements == (Shard(0),)
    out = _pair_case(rank, mesh, "tie reversed", lambda a, b: a[None, :] * b[:, None], [x, y6], [sx, sx], 0)
    assert out.placements == (Shard(1),)
    # where / clamp with operands sharded on different dims
    _pair_case(rank, mesh, "where", lambda a, b: torch.where(a[:, None, :1] > 0, a[:, None], b[None, :]), [x, y],
               [sx, sy], 0)
    _pair_case(rank, mesh, "clamp", lambda a, b: torch.clamp(a[:, None], min=b[None, :]), [x, y], [sx, sy], 0)
    # a feature-sharded operand meets a row-sharded one: the cheaper (the [3] columns) is gathered
    cols = torch.randn(1, 3, generator=g, dtype=torch.float64)
    col_sizes = {1: [3], 2: [1, 2], 3: [1, 1, 1], 4: [0, 1, 2, 0]}[world]
    _pair_case(rank, mesh, "rows + sharded columns", lambda a, c: a + c, [x, cols],
               [sx, ((Shard(1),), col_sizes, 1)], 0)
    # operands of different ndim sharded alike (right-aligned) pair locally
    x3 = x[None].clone()
    out = _pair_case(rank, mesh, "different ndim", lambda a, b: a * b, [x, x3], [sx, ((Shard(1),), ns, 1)], 0)
    assert out.placements == (Shard(1),)
    # replicated and plain operands still pair with the sharded one's rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _pair_case(rank, mesh, "with a replicated one", lambda a, b, c: a[:, None] - b[None, :] + c,
                   [x, y, y], [sx, sy, ((Replicate(),), None, 0)], 0)

    # the same dim with other shard boundaries: the later operand's rows move onto the first's
    if world > 1:
        moved = ns[1:] + ns[:1]
        out = _pair_case(rank, mesh, "same dim, other boundaries", lambda a, b: a - 2 * b, [x, x.cos()],
                         [sx, ((Shard(0),), moved, 0)], 0)
        assert out.shard_sizes() == list(ns)
    st = ShardTensor.from_local(_rows(x, ns, rank).clone(), mesh, (Shard(0),), sharding_shapes={0: ns})
    _expect(NotImplementedError, lambda: torch.where(st > 0), "torch.where", "full_tensor")

    with promotion("raise"):  # casts read a plain tensor's dtype only: no promotion
        assert st.type_as(torch.zeros(5, dtype=torch.float32)).dtype == torch.float32
        assert st.to(torch.zeros(7, dtype=torch.float32)).placements == (Shard(0),)
    # clone / contiguous of a Partial tensor stay Partial (exact: the copy of a sum is the sum of copies)
    part = ShardTensor.from_local(torch.full((2, 3), float(rank + 1), dtype=torch.float64), mesh, (Partial(),))
    for copy in (part.clone(), part.contiguous(), torch.clone(part)):
        assert copy.placements == (Partial(),)
        _close(copy.full_tensor(), torch.full((2, 3), float(sum(range(1, world + 1))), dtype=torch.float64), "copy")
    _expect(NotImplementedError, lambda: part.float(), "Partial")
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_pointwise_layouts(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
