"""View family on ShardTensor at 1-4 gloo ranks with uneven shards (one rank holds zero rows):
view / reshape / flatten / unflatten / squeeze / unsqueeze / expand / movedim, on unsharded dims
and on the sharded dim where every rank's rows stay one block, values and gradients against one
process (float64 1e-10, float32 1e-5), the resulting layouts, replicated inputs, and the refused
reshapes (NotImplementedError naming the op and why) on every rank."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect
from tests.tensor._ops._mesh2d import check_on_dp_domain_mesh

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 3]}
EVEN_PAIRS = {1: [8], 2: [0, 8], 3: [2, 0, 6], 4: [2, 4, 0, 2]}  # every offset and size even
ODD = {2: [3, 5], 3: [2, 1, 5], 4: [1, 3, 0, 4]}
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _check(name, f, full, sizes, dim, mesh, rank):
    """``f`` on a ShardTensor of ``full`` (sharded along ``dim`` with ``sizes``) against ``f`` on
    ``full``: values, and the gradient of a weighted sum. Returns the result's (placements, sizes)."""
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor
    off, n = sum(sizes[:rank]), sizes[rank]
    loc = full.narrow(dim, off, n).clone().requires_grad_(True)
    st = ShardTensor.from_local(loc, mesh, (Shard(dim),), sharding_shapes=list(sizes))
    ref_in = full.clone().requires_grad_(True)
    ref, out = f(ref_in), f(st)
    assert isinstance(out, ShardTensor), f"{name}: got {type(out).__name__}"
    got = out.full_tensor()
    tol = TOL[full.dtype]
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    assert torch.allclose(got, ref, **tol), f"{name}: max diff {(got - ref).abs().max().item()}"
    w = torch.randn(ref.shape, dtype=full.dtype, generator=torch.Generator().manual_seed(5))
    (ref * w).sum().backward()
    (got * w).sum().backward()
    want = ref_in.grad.narrow(dim, off, n)
    assert torch.allclose(loc.grad, want, **tol), f"{name}: gradient differs on rank {rank}"
    return tuple(out.placements), out.shard_sizes()


def _view_checks(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor
    mesh = init_device_mesh("cpu", (world,))
    s = SIZES[world]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 4, 6, dtype=torch.float64, generator=g)
    for full in (x, x.float()):
        c = lambda name, f, dim=0, t=full, sizes=s: _check(name, f, t, sizes, dim, mesh, rank)  # noqa: E731
        if full.dtype == torch.float32:  # the same paths at float32 tolerance, a few cases
            assert c("f32 flatten()", lambda t: t.flatten()) == ((Shard(0),), [n * 24 for n in s])
            assert c("f32 unsqueeze(0)", lambda t: t.unsqueeze(0)) == ((Shard(1),), s)
            assert c("f32 expand", lambda t: t.unsqueeze(1).expand(7, 3, 4, 6)) == ((Shard(0),), s)
            break
        assert c("flatten(1)", lambda t: t.flatten(1)) == ((Shard(0),), s)
        assert c("flatten()", lambda t: t.flatten()) == ((Shard(0),), [n * 24 for n in s])
        assert c("view(-1, 6)", lambda t: t.view(-1, 6)) == ((Shard(0),), [n * 4 for n in s])
        assert c("reshape features", lambda t: t.reshape(7, 2, 2, 6)) == ((Shard(0),), s)
        assert c("reshape merge+split", lambda t: torch.reshape(t, (-1, 2, 4))) == ((Shard(0),), [n * 3 for n in s])
        assert c("unsqueeze(0)", lambda t: t.unsqueeze(0)) == ((Shard(1),), s)
        assert c("unsqueeze(-1)", lambda t: torch.unsqueeze(t, -1)) == ((Shard(0),), s)
        assert c("squeeze", lambda t: t[:, None, :, None].squeeze()) == ((Shard(0),), s)
        assert c("squeeze(dim)", lambda t: t.unsqueeze(1).squeeze(1)) == ((Shard(0),), s)
        assert c("expand", lambda t: t.unsqueeze(1).expand(7, 3, 4, 6)) == ((Shard(0),), s)
        assert c("expand new dim", lambda t: t.expand(2, -1, 4, 6)) == ((Shard(1),), s)
        assert c("expand_as", lambda t: t[:, :1].expand_as(torch.empty(7, 4, 6))) == ((Shard(0),), s)
        assert c("view_as", lambda t: t.view_as(torch.empty(7, 24))) == ((Shard(0),), s)
        assert c("movedim", lambda t: t.movedim(0, 2)) == ((Shard(2),), s)
        assert c("ravel", lambda t: t.ravel()) == ((Shard(0),), [n * 24 for n in s])
        # sharded along a middle dim: flatten with the dims after it, unsqueeze before it
        xt = full.transpose(0, 1).contiguous()  # (4, 7, 6), sharded along dim 1
        assert c("Shard(1) flatten(1)", lambda t: t.flatten(1), 1, xt) == ((Shard(1),), [n * 6 for n in s])
        assert c("Shard(1) unsqueeze(0)", lambda t: t.unsqueeze(0), 1, xt) == ((Shard(2),), s)
        assert c("Shard(1) movedim", lambda t: torch.movedim(t, 1, 0), 1, xt) == ((Shard(0),), s)
        assert c("Shard(1) unflatten(2)", lambda t: t.unflatten(2, (3, 2)), 1, xt) == ((Shard(1),), s)
    # unflatten of the sharded dim: pieces of 2 rows divide every rank's block
    e = EVEN_PAIRS[world]
    xe = torch.randn(8, 3, dtype=torch.float64, generator=g)
    assert _check("unflatten(0)", lambda t: t.unflatten(0, (4, 2)), xe, e, 0, mesh, rank) == \
        ((Shard(0),), [n // 2 for n in e])
    assert _check("view split", lambda t: t.view(4, 6), xe, e, 0, mesh, rank) == ((Shard(0),), [n // 2 for n in e])
    # a global size-1 sharded dim squeezed away: the next dim carries the shard
    one = [1] + [0] * (world - 1)
    assert _check("squeeze size-1 shard", lambda t: t.squeeze(0), x[:1], one, 0, mesh, rank) == \
        ((Shard(0),), [4] + [0] * (world - 1))

    # refused, on every rank alike
    loc = x.narrow(0, sum(s[:rank]), s[rank])
    st = ShardTensor.from_local(loc, mesh, (Shard(0),), sharding_shapes=list(s))
    st1 = ShardTensor.from_local(x.transpose(0, 1).contiguous().narrow(1, sum(s[:rank]), s[rank]), mesh,
                                 (Shard(1),), sharding_shapes=list(s))
    _expect(NotImplementedError, lambda: st1.flatten(0, 1), "flatten", "contiguous block")
    _expect(NotImplementedError, lambda: st1.reshape(-1), "reshape", "contiguous block")
    _expect(NotImplementedError, lambda: st.movedim(0, 1).view(4, 7, 3, 2).view(-1), "view", "contiguous block")
    st_one = ShardTensor.from_local(x[:1].narrow(0, 0, one[rank]), mesh, (Shard(0),), sharding_shapes=one)
    _expect(NotImplementedError, lambda: st_one.expand(3, 4, 6), "expand", "sharded dim")
    if world > 1:
        o = ODD[world]
        xo = torch.randn(8, 3, dtype=torch.float64, generator=g)
        sto = ShardTensor.from_local(xo.narrow(0, sum(o[:rank]), o[rank]), mesh, (Shard(0),), sharding_shapes=o)
        _expect(NotImplementedError, lambda: sto.unflatten(0, (4, 2)), "unflatten", "contiguous block")
    _expect(NotImplementedError, lambda: st.view(torch.int16), "view", "element size")
    assert st.view(torch.int64).shard_sizes() == s  # same element size: a local reinterpretation

    # replicated ShardTensors: every shape op runs locally
    rep_leaf = x.clone().requires_grad_(True)
    rep = ShardTensor.from_local(rep_leaf, mesh, (Replicate(),))
    y = rep.flatten(0, 1).unflatten(0, (2, 14)).unsqueeze(0).squeeze(0).movedim(2, 0).expand(2, -1, -1, -1)
    ref_leaf = x.clone().requires_grad_(True)
    ref = ref_leaf.flatten(0, 1).unflatten(0, (2, 14)).movedim(2, 0).expand(2, -1, -1, -1)
    assert tuple(y.placements) == (Replicate(),)
    assert torch.allclose(y.full_tensor(), ref, rtol=0, atol=0)
    (y.to_local() ** 2).sum().backward()
    (ref ** 2).sum().backward()
    assert torch.allclose(rep_leaf.grad, ref_leaf.grad, rtol=1e-12, atol=1e-12)
    if world == 4:  # on a 2 x 2 (dp, domain) mesh
        for name, f in (("flatten", lambda t: t.flatten(0, 1)), ("unsqueeze", lambda t: t.unsqueeze(1)),
                        ("slice", lambda t: t[1:6:2]), ("select feature", lambda t: t[:, 2]),
                        ("index_select", lambda t: t.index_select(0, torch.tensor([6, 0, 3, 3])))):
            check_on_dp_domain_mesh(name, f, [x], [3, 4])
    return True


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_view_family(world):
    assert run_distributed(_view_checks, world, timeout=TIMEOUT) == [True] * world


TWO_DIMS_VIEWS = {
    "flatten(0, 1)": lambda t: t.flatten(0, 1),
    "reshape(6, 9, 6)": lambda t: t.reshape(6, 9, 6),
    "view(2, 3, 1, 9, 6, 1)": lambda t: t.view(2, 3, 1, 9, 6, 1),
    "unsqueeze(3).squeeze(3)": lambda t: t.unsqueeze(3).unsqueeze(0).squeeze(3),
    "unflatten(1, (3, 1))": lambda t: t.unflatten(1, (3, 1)),
    "view_as": lambda t: t.view_as(torch.empty(6, 9, 6)),
    "movedim(1, 3)": lambda t: t.movedim(1, 3),
    "transpose(2, 3)": lambda t: t.transpose(2, 3),
    "expand": lambda t: t[:, :1].expand(2, 4, 9, 6),
    "expand new dim": lambda t: t.expand(3, 2, 3, 9, 6),
}


def _two_dims_views(rank, world):
    """Shape ops on an image [2, 3, 9, 6] split in height and width: exact or refused by name."""
    from meshshard.distributed import Shard, init_device_mesh
    from meshshard.tensor import ShardTensor
    from tests.tensor._ops._mesh2d import SPLIT_9_BY_6, check_split_in_two_dims

    x = torch.randn(2, 3, 9, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    for shape, s0, s1 in SPLIT_9_BY_6[world]:
        for i, (name, f) in enumerate(TWO_DIMS_VIEWS.items()):
            check_split_in_two_dims(name, f, x, (), shape, (s0, s1), seed=i)
        mesh = init_device_mesh("cpu", shape)
        local = x[:, :, sum(s0[:mesh.get_local_rank(0)]):][:, :, :s0[mesh.get_local_rank(0)]]
        local = local[..., sum(s1[:mesh.get_local_rank(1)]):][..., :s1[mesh.get_local_rank(1)]]
        st = ShardTensor.from_local(local.contiguous(), mesh, (Shard(2), Shard(3)), sharding_shapes={0: s0, 1: s1})
        if max(s1) < 6:  # a width split: height and width cannot merge
            _expect(NotImplementedError, lambda: st.flatten(2), "flatten", "contiguous block")
    return True


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", [1, 3, 4])
def test_view_family_split_in_two_dims(world):
    assert run_distributed(_two_dims_views, world, timeout=TIMEOUT) == [True] * world
