"""Index family on ShardTensor at 1-4 gloo ranks with uneven shards (one rank holds zero rows):
``x[...]`` with ints / slices / None / ... on every dim, select, narrow, split / chunk / unbind,
index_select and gather by global indices with plain and sharded indices, values and gradients
against one process (float64 1e-10, float32 1e-5), the resulting layouts, replicated inputs, and
errors raised on every rank (advanced indexing, unbind of the sharded dim, out-of-range indices
on one rank only)."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 3]}
IDX5 = {1: [5], 2: [3, 2], 3: [0, 4, 1], 4: [2, 0, 2, 1]}     # rows of a sharded index, per rank
IDX4 = {1: [4], 2: [1, 3], 3: [2, 0, 2], 4: [1, 0, 2, 1]}
STEP2 = {1: [3], 2: [0, 3], 3: [1, 0, 2], 4: [0, 2, 0, 1]}    # rows 1, 3, 5 of x[1:6:2] per rank
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _check(name, f, full, sizes, mesh, coord, placements=None):
    """``f`` on a ShardTensor of ``full`` against ``f`` on ``full``: values and the gradient of a
    weighted sum. The ShardTensor has ``placements`` (default ``(Shard(0),)``; its rows along dim 0
    by ``sizes``, ``coord`` this rank's index on the sharding mesh dim; all Replicate: the whole
    tensor). Returns (placements, sizes) of the result, a list of them for several outputs."""
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor
    placements = placements or (Shard(0),)
    replicated = not any(isinstance(p, Shard) for p in placements)
    off, n = sum(sizes[:coord]), sizes[coord]
    if replicated:
        loc = full.clone().requires_grad_(True)
        st = ShardTensor.from_local(loc, mesh, placements)
    else:
        loc = full.narrow(0, off, n).clone().requires_grad_(True)
        st = ShardTensor.from_local(loc, mesh, placements, sharding_shapes=list(sizes))
    ref_in = full.clone().requires_grad_(True)
    ref, out = f(ref_in), f(st)
    refs, outs = (ref, out) if isinstance(ref, (tuple, list)) else ((ref,), (out,))
    assert len(refs) == len(outs), f"{name}: {len(outs)} outputs vs {len(refs)}"
    tol = TOL[full.dtype]
    loss_ref, loss, layouts = 0, 0, []
    for k, (r, o) in enumerate(zip(refs, outs)):
        assert isinstance(o, ShardTensor), f"{name}: got {type(o).__name__}"
        got = o.full_tensor()
        assert got.shape == r.shape, f"{name}[{k}]: shape {tuple(got.shape)} vs {tuple(r.shape)}"
        assert torch.allclose(got, r, **tol), f"{name}[{k}]: max diff {(got - r).abs().max().item()}"
        w = torch.randn(r.shape, dtype=full.dtype, generator=torch.Generator().manual_seed(5 + k))
        loss_ref, loss = loss_ref + (r * w).sum(), loss + (got * w).sum()
        layouts.append((tuple(o.placements), o.shard_sizes()))
    loss_ref.backward()
    loss.backward()
    want = ref_in.grad if replicated else ref_in.grad.narrow(0, off, n)
    have = loc.grad if loc.grad is not None else torch.zeros_like(loc)
    assert torch.allclose(have, want, **tol), f"{name}: gradient differs at coordinate {coord}"
    return layouts if len(layouts) > 1 else layouts[0]


def _index_checks(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor
    from meshshard.tensor.spec import chunk_sizes
    mesh = init_device_mesh("cpu", (world,))
    s = SIZES[world]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 4, 6, dtype=torch.float64, generator=g)
    rep = (Replicate(),)

    def sharded_index(full, sizes, dim=0):
        local = full.narrow(dim, sum(sizes[:rank]), sizes[rank]).clone()
        return ShardTensor.from_local(local, mesh, (Shard(dim),), sharding_shapes=list(sizes))

    i5, i4 = IDX5[world], IDX4[world]
    rows = torch.tensor([4, 0, 0, 6, 3, 1, 4, 2])
    rows5 = torch.tensor([6, 0, 6, 2, 3])
    rows5_st = sharded_index(rows5, i5)
    knn = torch.randint(0, 7, (5, 3), generator=torch.Generator().manual_seed(11))  # [rows, k] neighbour ids
    knn_st = sharded_index(knn, i5)
    g0 = torch.randint(0, 7, (5, 4, 3), generator=g)
    g0_st = sharded_index(g0, i5)
    g1 = torch.randint(0, 7, (3, 4, 6), generator=g)
    g1_st = sharded_index(g1, i4, dim=1)
    g2 = torch.randint(0, 6, (7, 4, 3), generator=g)

    def pick(t, plain, st):
        return st if isinstance(t, ShardTensor) else plain

    for full in (x, x.float()):
        def c(name, f, sizes=s, full=full):
            return _check(name, f, full, sizes, mesh, rank)
        if full.dtype == torch.float32:  # the same paths at float32 tolerance, a few cases
            assert c("f32 x[1:6:2]", lambda t: t[1:6:2]) == ((Shard(0),), STEP2[world])
            assert c("f32 x[3]", lambda t: t[3]) == (rep, None)
            assert c("f32 index_select", lambda t: torch.index_select(t, 0, pick(t, rows5, rows5_st))) == \
                ((Shard(0),), i5)
            assert c("f32 gather", lambda t: t.gather(0, pick(t, g1, g1_st))) == ((Shard(1),), i4)
            break
        assert c("x[1:6:2]", lambda t: t[1:6:2]) == ((Shard(0),), STEP2[world])
        assert c("x[..., None, 1:3, ::2]", lambda t: t[..., None, 1:3, ::2]) == ((Shard(0),), s)
        assert c("x[-2:]", lambda t: t[-2:])[1] == [max(0, min(o + n, 7) - max(o, 5)) for o, n in
                                                     zip([sum(s[:r]) for r in range(world)], s)]
        assert c("x[10:]", lambda t: t[10:]) == ((Shard(0),), [0] * world)
        assert c("x[3]", lambda t: t[3]) == (rep, None)
        assert c("x[-1, ..., 2]", lambda t: t[-1, ..., 2]) == (rep, None)
        assert c("x[:, 1, -1]", lambda t: t[:, 1, -1]) == ((Shard(0),), s)
        assert c("x[None, 2:, 0]", lambda t: t[None, 2:, 0])[0] == (Shard(1),)
        assert c("select(0, -2)", lambda t: t.select(0, -2)) == (rep, None)
        assert c("select(1, 2)", lambda t: torch.select(t, 1, 2)) == ((Shard(0),), s)
        assert c("narrow(0, 1, 4)", lambda t: t.narrow(0, 1, 4))[0] == (Shard(0),)
        assert c("narrow(2, -3, 2)", lambda t: torch.narrow(t, 2, -3, 2)) == ((Shard(0),), s)
        assert len(c("split(2)", lambda t: t.split(2))) == 4
        assert len(c("split([3, 4])", lambda t: torch.split(t, [3, 4]))) == 2
        assert len(c("chunk(3)", lambda t: t.chunk(3))) == 3
        assert c("split(4, dim=2)", lambda t: t.split(4, dim=2))[1] == ((Shard(0),), s)
        assert c("chunk(2, 1)", lambda t: torch.chunk(t, 2, 1))[0] == ((Shard(0),), s)
        assert c("unbind(1)", lambda t: t.unbind(1))[3] == ((Shard(0),), s)
        assert c("unbind(2)", lambda t: torch.unbind(t, 2))[0] == ((Shard(0),), s)
        # index_select / gather by global indices
        assert c("index_select(0, plain)", lambda t: t.index_select(0, rows)) == \
            ((Shard(0),), chunk_sizes(len(rows), world))
        assert c("x[rows]", lambda t: t[rows]) == ((Shard(0),), chunk_sizes(len(rows), world))
        assert c("x[sharded rows]", lambda t: t[pick(t, rows5, rows5_st)]) == ((Shard(0),), i5)
        assert c("x[sharded rows, :, :]", lambda t: t[pick(t, rows5, rows5_st), :, :]) == ((Shard(0),), i5)
        assert c("x[rows, ...]", lambda t: t[rows, ...]) == ((Shard(0),), chunk_sizes(len(rows), world))
        assert c("x[2-d rows]", lambda t: t[knn]) == ((Shard(0),), chunk_sizes(5, world))
        assert c("x[sharded 2-d rows]", lambda t: t[pick(t, knn, knn_st)]) == ((Shard(0),), i5)
        assert c("index_select(0, sharded)", lambda t: torch.index_select(t, 0, pick(t, rows5, rows5_st))) == \
            ((Shard(0),), i5)
        assert c("index_select(2, plain)", lambda t: t.index_select(2, torch.tensor([5, 0, 5]))) == ((Shard(0),), s)
        assert c("index_select(1, sharded)", lambda t: t.index_select(1, pick(t, rows5 % 4, rows5_st % 4))) == \
            ((Shard(1),), i5)
        assert c("gather(0, plain)", lambda t: t.gather(0, g0)) == ((Shard(0),), chunk_sizes(5, world))
        assert c("gather(0, sharded)", lambda t: torch.gather(t, 0, pick(t, g0, g0_st))) == ((Shard(0),), i5)
        assert c("gather(0, sharded along 1)", lambda t: t.gather(0, pick(t, g1, g1_st))) == ((Shard(1),), i4)
        assert c("gather(2, plain)", lambda t: t.gather(2, g2)) == ((Shard(0),), s)
        # a replicated source: local, or laid out like a sharded index
        r = lambda name, f: _check(name, f, full, s, mesh, rank, placements=rep)  # noqa: E731
        assert r("replicated x[idx]", lambda t: t[torch.tensor([1, 1, 5])]) == (rep, None)
        assert r("replicated x[2:, 1]", lambda t: t[2:, 1]) == (rep, None)
        assert r("replicated x[sharded 2-d rows]", lambda t: t[pick(t, knn, knn_st)]) == ((Shard(0),), i5)
        assert r("replicated index_select", lambda t: t.index_select(0, pick(t, rows5, rows5_st))) == \
            ((Shard(0),), i5)
        assert r("replicated gather", lambda t: t.gather(0, pick(t, g1, g1_st))) == ((Shard(1),), i4)

    if world == 4:  # a 2 x 2 (dp x domain) mesh: Replicate on dp, uneven Shard(0) on domain
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
        pl2, s2, coord = (Replicate(), Shard(0)), [5, 2], mesh2.get_local_rank(1)
        idx2 = ShardTensor.from_local(rows5[:3] if coord == 0 else rows5[3:], mesh2, pl2)

        def c2(name, f):
            return _check(name, f, x, s2, mesh2, coord, pl2)
        assert c2("2-D x[1:6:2]", lambda t: t[1:6:2]) == (pl2, [2, 1])
        assert c2("2-D x[6]", lambda t: t[6]) == ((Replicate(), Replicate()), None)
        assert c2("2-D flatten", lambda t: t.flatten(1).unsqueeze(0)) == ((Replicate(), Shard(1)), s2)
        assert c2("2-D index_select plain", lambda t: t.index_select(0, rows)) == (pl2, [4, 4])
        assert c2("2-D index_select sharded", lambda t: t.index_select(0, pick(t, rows5, idx2))) == (pl2, [3, 2])
        assert c2("2-D gather", lambda t: t.gather(0, g0)) == (pl2, [3, 2])

    # errors, on every rank alike
    st = sharded_index(x, s)
    _expect(NotImplementedError, lambda: st[torch.ones(7, dtype=torch.bool)], "__getitem__", "advanced indexing")
    _expect(NotImplementedError, lambda: st[:, torch.tensor([0, 1])], "__getitem__", "advanced indexing")
    _expect(NotImplementedError, lambda: st[[0, 1]], "__getitem__", "advanced indexing")
    _expect(NotImplementedError, lambda: st.unbind(0), "unbind", "sharded dim")
    _expect(IndexError, lambda: st[7], "out of bounds")
    _expect(IndexError, lambda: st[:, 4], "out of bounds")
    _expect(ValueError, lambda: st[::-1], "step")
    _expect(IndexError, lambda: st.index_select(0, torch.tensor([0, 7])), "index_select", "out of range")
    bad = rows5.clone()
    bad[-1] = -1  # held by the last rank that has index rows only
    _expect(IndexError, lambda: st.index_select(0, sharded_index(bad, i5)), "index_select", "out of range")
    _expect(IndexError, lambda: st.gather(0, g0 + 7), "gather", "out of range")
    _expect(IndexError, lambda: st[knn + 7], "__getitem__", "out of range")
    return True


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_index_family(world):
    assert run_distributed(_index_checks, world, timeout=TIMEOUT) == [True] * world


TWO_DIMS_INDEX = {
    "slices on both": lambda t: t[:, :, 1:8:2, 2:],
    "int on the height": lambda t: t[:, :, 4],
    "int on both": lambda t: t[:, 1, 7, -1],
    "ints, slice and None": lambda t: t[0, :, None, 3, 1:5],
    "ellipsis and int": lambda t: t[..., 5],
    "select(3, 0)": lambda t: t.select(3, 0),
    "narrow(2, 2, 5)": lambda t: t.narrow(2, 2, 5),
    "split along the width": lambda t: t.split(4, dim=3)[1],
    "chunk along the height": lambda t: t.chunk(2, dim=2)[0],
    "split along channels": lambda t: t.split([1, 2], dim=1)[1],
    "unbind(1)": lambda t: t.unbind(1)[2],
    "index_select channels": lambda t: t.index_select(1, torch.tensor([2, 0, 2])),
    "tensor key on the batch": lambda t: t[torch.tensor([1, 0, 1])],
    "gather channels": lambda t: t.gather(1, torch.randint(0, 3, (2, 2, 9, 6),
                                                           generator=torch.Generator().manual_seed(0))),
    "index_select along the height": lambda t: t.index_select(2, torch.tensor([8, 0, 3, 3, 5])),
    "index_select along the width": lambda t: t.index_select(3, torch.tensor([5, 1, 1])),
    "gather along the height": lambda t: t.gather(2, torch.randint(0, 9, (2, 3, 4, 6),
                                                                   generator=torch.Generator().manual_seed(1))),
}


def _two_dims_index(rank, world):
    """Indexing an image [2, 3, 9, 6] split in height and width: exact or refused by name."""
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor
    from tests.tensor._ops._mesh2d import SPLIT_9_BY_6, check_split_in_two_dims

    x = torch.randn(2, 3, 9, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    for shape, s0, s1 in SPLIT_9_BY_6[world]:
        for i, (name, f) in enumerate(TWO_DIMS_INDEX.items()):
            check_split_in_two_dims(name, f, x, (), shape, (s0, s1), seed=i)
        mesh = init_device_mesh("cpu", shape)
        c0, c1 = mesh.get_local_rank(0), mesh.get_local_rank(1)
        local = x[:, :, sum(s0[:c0]):sum(s0[:c0 + 1]), sum(s1[:c1]):sum(s1[:c1 + 1])].contiguous()
        st = ShardTensor.from_local(local, mesh, (Shard(2), Shard(3)), sharding_shapes={0: s0, 1: s1})
        held = torch.tensor([1, 0]) if c0 == 0 else torch.tensor([], dtype=torch.int64)
        sharded_index = ShardTensor.from_local(held, mesh, (Shard(0), Replicate()),
                                               sharding_shapes={0: [2] + [0] * (shape[0] - 1)})
        _expect(NotImplementedError, lambda: st.index_select(2, sharded_index), "index_select", "sharded index")
        _expect(NotImplementedError, lambda: st.unbind(3), "unbind", "sharded dim 3")
    return True


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", [1, 3, 4])
def test_index_family_split_in_two_dims(world):
    assert run_distributed(_two_dims_index, world, timeout=TIMEOUT - 20) == [True] * world
