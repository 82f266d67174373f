"""ShardTensor sharded on several mesh dims: 2-D meshes (1x1, 1x2, 2x1, 1x3, 3x1, 2x2 at world 1-4)
with ``(Shard(2), Shard(3))`` (an image split in height and width, uneven, with zero-size shards):
from_local (infer / chunk / dict), offsets and sharding_shapes per mesh dim, redistribute between
placements (values and gradients), full_tensor, scatter_tensor, and the generic op families
(pointwise, sum / mean, cat, permute, row-wise) against one process (float64 1e-10, float32 1e-5)."""
import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

TIMEOUT = 180
MESHES = {1: [(1, 1)], 2: [(1, 2), (2, 1)], 3: [(3, 1), (1, 3)], 4: [(2, 2)]}
H_SIZES = {1: [5], 2: [3, 0], 3: [2, 0, 3]}  # rows of each mesh-dim-0 coordinate (uneven, a zero)
W_SIZES = {1: [6], 2: [1, 4], 3: [2, 3, 0]}
TOL64 = dict(rtol=1e-10, atol=1e-10)
TOL32 = dict(rtol=1e-5, atol=1e-5)


def _close(a, b, what, tol=TOL64):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **tol), f"{what}: max diff {(a - b).abs().max().item()}"


def _block(full, mesh, hs, ws):
    c0, c1 = mesh.get_local_rank(0), mesh.get_local_rank(1)
    h0, w0 = sum(hs[:c0]), sum(ws[:c1])
    return full[:, :, h0:h0 + hs[c0], w0:w0 + ws[c1]], (h0, w0)


def _loss(x, bias, img):
    """An op chain through every generic family; ``x`` is a ShardTensor or the whole tensor."""
    y = torch.tanh(x) * 2.0 + x * x - bias                  # pointwise, plain tensor along channels
    y = y * img                                             # plain tensor spanning both sharded dims
    y = torch.cat([y, torch.sigmoid(x)], dim=1)             # cat along channels (unsharded)
    y = torch.softmax(y, dim=1)                             # row-wise over channels
    p = y.permute(0, 2, 3, 1)                               # both Shard dims move
    col = p.sum(dim=(1, 3))                                 # reduces H (mesh dim 0), W stays sharded
    out = (col * col).mean() + p.mean() + y.sum(dim=3, keepdim=True).pow(2).sum() + x.mean(dim=(0, 1)).sum()
    return out, col


def _mesh_checks(rank, shape2):
    from meshshard.distributed import Partial, Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor, scatter_tensor

    mesh = init_device_mesh("cpu", shape2)
    hs, ws = H_SIZES[shape2[0]], W_SIZES[shape2[1]]
    g = torch.Generator().manual_seed(7)
    full = torch.randn(2, 3, sum(hs), sum(ws), generator=g, dtype=torch.float64)
    bias = torch.randn(3, 1, 1, generator=g, dtype=torch.float64)
    img = torch.rand(sum(hs), sum(ws), generator=g, dtype=torch.float64) + 0.5
    loc, (h0, w0) = _block(full, mesh, hs, ws)
    pl = (Shard(2), Shard(3))

    # construction and layout queries
    x = ShardTensor.from_local(loc.clone(), mesh, pl)
    assert x.shape == full.shape and x._local_tensor.shape == loc.shape
    assert x.offsets(0) == h0 and x.offsets(1) == w0 and x.offsets() == (h0, w0)
    assert x.shard_sizes(0) == hs and x.shard_sizes(1) == ws
    ss = x.sharding_shapes()
    assert [s[2] for s in ss[0]] == hs and [s[3] for s in ss[1]] == ws and all(s[1] == 3 for s in ss[0] + ss[1])
    _close(x.full_tensor(), full, "full_tensor")
    xd = ShardTensor.from_local(loc.clone(), mesh, pl, sharding_shapes=ss)
    assert xd._shard_sizes == x._shard_sizes and xd.shape == full.shape
    even = torch.ones(1, 2, 3, 4)
    xc = ShardTensor.from_local(even, mesh, pl, sharding_shapes="chunk")
    assert xc.shape == (1, 2, 3 * shape2[0], 4 * shape2[1]) and xc.offsets() == (3 * mesh.get_local_rank(0),
                                                                                 4 * mesh.get_local_rank(1))
    _expect(NotImplementedError, lambda: ShardTensor.from_local(loc, mesh, (Shard(2), Shard(2))), "same tensor dim")

    # redistribute: values there and back, gradients through the round trip
    for tgt in [(Shard(3), Shard(2)), (Replicate(), Shard(2)), (Shard(1), Shard(0)), (Partial(), Shard(3)),
                (Replicate(), Replicate()), (Shard(2), Partial()), (Partial(), Partial()), (Shard(2), Replicate())]:
        a = loc.clone().requires_grad_()
        y = ShardTensor.from_local(a, mesh, pl, sharding_shapes=ss).redistribute(placements=tgt)
        assert tuple(y.placements) == tgt
        _close(y.full_tensor(), full, f"redistribute to {tgt}")
        back = y.redistribute(placements=pl, sharding_shapes=ss)
        _close(back.to_local(), loc, f"redistribute {tgt} and back")
        (y.full_tensor() * img).sum().backward()
        _close(a.grad, _block(img.expand_as(full), mesh, hs, ws)[0], f"grad through {tgt}")
    rb = x.redistribute(placements=pl, sharding_shapes={0: [sum(hs)] + [0] * (len(hs) - 1),
                                                        1: [0] * (len(ws) - 1) + [sum(ws)]})
    _close(rb.full_tensor(), full, "rebalance on both mesh dims")

    # scatter_tensor from the last rank
    src = mesh.size() - 1
    sc = scatter_tensor(full if rank == src else None, src, mesh, pl, sharding_shapes=ss)
    _close(sc.to_local(), loc, "scatter_tensor")
    sc2 = scatter_tensor(full if rank == 0 else None, 0, mesh, (Replicate(), Shard(3)))
    _close(sc2.full_tensor(), full, "scatter_tensor Replicate x Shard")

    # op families: values and gradients against one process
    a = loc.clone().requires_grad_()
    st = ShardTensor.from_local(a, mesh, pl, sharding_shapes=ss)
    loss, col = _loss(st, bias, img)
    assert tuple(col.placements) == (Replicate(), Shard(1)), col.placements
    ref = full.clone().requires_grad_()
    ref_loss, ref_col = _loss(ref, bias, img)
    _close(loss.full_tensor(), ref_loss, "loss")
    _close(col.full_tensor(), ref_col, "partial reduction")
    loss.backward()
    ref_loss.backward()
    _close(a.grad, _block(ref.grad, mesh, hs, ws)[0], "gradient of the op chain")

    # float32 at 1e-5
    a32 = loc.float().clone().requires_grad_()
    l32, _ = _loss(ShardTensor.from_local(a32, mesh, pl, sharding_shapes=ss), bias.float(), img.float())
    r32 = full.float().clone().requires_grad_()
    rl32, _ = _loss(r32, bias.float(), img.float())
    _close(l32.full_tensor(), rl32, "float32 loss", TOL32)
    l32.backward()
    rl32.backward()
    _close(a32.grad, _block(r32.grad, mesh, hs, ws)[0], "float32 gradient", TOL32)

    # families not generalised refuse loudly; ops mixing a sharded dim refuse
    _expect(NotImplementedError, lambda: st @ torch.ones(sum(ws), 2, dtype=torch.float64), "several mesh dims")
    _expect(NotImplementedError, lambda: F.softmax(st, dim=2), "sharded dim 2")
    _expect(NotImplementedError, lambda: torch.cat([st, st], dim=3), "sharded dim 3")
    return True


def _rank_main(rank, world):
    return all(_mesh_checks(rank, s) for s in MESHES[world])


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", sorted(MESHES))
def test_multi_dim(world):
    assert run_distributed(_rank_main, world, timeout=TIMEOUT) == [True] * world
