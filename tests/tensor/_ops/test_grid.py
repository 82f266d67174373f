"""Grid op families on a ShardTensor sharded along a spatial dim (conv, conv_transpose, pooling,
pad, interpolate) at 1-4 gloo ranks with uneven, thin and zero-row shards: values and the
gradients of the input and of the weights against one process (float64 1e-10, float32 1e-5).
All cases run inside one spawned group per world size (a group costs seconds to start)."""
import zlib

import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

TIMEOUT = 240
# rows of the sharded dim per rank: uneven, with zero-row and 1-row (thinner than the halo) shards
SIZES = {1: [[11]], 2: [[0, 11], [4, 7]], 3: [[5, 1, 5]], 4: [[1, 3, 0, 7]]}
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _conv(nd, transpose=False, k=3, **opts):
    def make(gen, dtype, c_in=3):
        groups = opts.get("groups", 1)
        if transpose:
            w = torch.randn((c_in, 6 // groups) + (k,) * nd, generator=gen, dtype=dtype)
        else:
            w = torch.randn((6, c_in // groups) + (k,) * nd, generator=gen, dtype=dtype)
        b = torch.randn(6, generator=gen, dtype=dtype)
        return [w, b]
    func = {(1, False): F.conv1d, (2, False): F.conv2d, (3, False): F.conv3d,
            (1, True): F.conv_transpose1d, (2, True): F.conv_transpose2d, (3, True): F.conv_transpose3d}[nd, transpose]
    return make, (lambda x, w, b: func(x, w, b, **opts))


CONV_CASES = {
    "conv1d k3 p1": (1, _conv(1, padding=1)),
    "conv1d k3 s2 p0": (1, _conv(1, stride=2)),
    "conv1d k5 s3 p2 d2": (1, _conv(1, k=5, stride=3, padding=2, dilation=2)),
    "conv1d same d2": (1, _conv(1, k=4, padding="same", dilation=2)),
    "conv2d k3 p1": (2, _conv(2, padding=1)),
    "conv2d k3 s2 p1": (2, _conv(2, stride=2, padding=1)),
    "conv2d groups3 s(2,1) d(2,1)": (2, _conv(2, stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=3)),
    "conv3d k3 s2 p1": (3, _conv(3, stride=2, padding=1)),
    "conv_transpose1d k3 s2 p1 op1": (1, _conv(1, transpose=True, stride=2, padding=1, output_padding=1)),
    "conv_transpose1d k2 s3": (1, _conv(1, transpose=True, k=2, stride=3)),
    "conv_transpose2d k3 s2 p1 d2": (2, _conv(2, transpose=True, stride=2, padding=1, dilation=2)),
    "conv_transpose3d k3 s1 p1": (3, _conv(3, transpose=True, padding=1)),
}


def _reflect_conv(x):
    torch.manual_seed(3)
    conv = torch.nn.Conv2d(3, 2, 3, padding=2, padding_mode="reflect").to(device=x.device, dtype=x.dtype)
    return conv(x)


def _plain(op):
    return (lambda gen, dtype: []), op


POOL_CASES = {
    "max_pool1d k3 s2 p1": (1, _plain(lambda x: F.max_pool1d(x, 3, 2, 1))),
    "max_pool1d k2 d3 ceil": (1, _plain(lambda x: F.max_pool1d(x, 2, 2, 0, dilation=3, ceil_mode=True))),
    "max_pool2d k3 s2 p1 ceil": (2, _plain(lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True))),
    "max_pool3d k2": (3, _plain(lambda x: F.max_pool3d(x, 2))),
    "avg_pool1d k3 s2 p1": (1, _plain(lambda x: F.avg_pool1d(x, 3, 2, 1))),
    "avg_pool1d k4 s3 p2 ceil no-pad-count": (1, _plain(lambda x: F.avg_pool1d(x, 4, 3, 2, True, False))),
    "avg_pool2d k3 s2 p1 ceil": (2, _plain(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True))),
    "avg_pool2d k(3,2) p(1,1) divisor": (2, _plain(lambda x: F.avg_pool2d(x, (3, 2), 1, (1, 1), divisor_override=5))),
    "avg_pool3d k3 s2 p1 no-pad-count": (3, _plain(lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False))),
    "adaptive_avg_pool1d 4": (1, _plain(lambda x: F.adaptive_avg_pool1d(x, 4))),
    "adaptive_avg_pool2d (7,3)": (2, _plain(lambda x: F.adaptive_avg_pool2d(x, (7, 3)))),
    "adaptive_max_pool2d (3,None)": (2, _plain(lambda x: F.adaptive_max_pool2d(x, (3, None)))),
    "adaptive_avg_pool3d 13": (3, _plain(lambda x: F.adaptive_avg_pool3d(x, (13, 2, 2)))),
    "nn.MaxPool2d": (2, _plain(torch.nn.MaxPool2d(2, ceil_mode=True))),
}
PAD_CASES = {
    "pad constant (3,2) value": (2, _plain(lambda x: F.pad(x, (1, 1, 3, 2), value=0.5))),
    "pad constant crop (-2,1)": (1, _plain(lambda x: F.pad(x, (-2, 1)))),
    "pad reflect (4,3)": (2, _plain(lambda x: F.pad(x, (1, 2, 4, 3), mode="reflect"))),
    "pad replicate (5,1)": (3, _plain(lambda x: F.pad(x, (1, 0, 1, 1, 5, 1), mode="replicate"))),
    "pad circular (6,11)": (1, _plain(lambda x: F.pad(x, (6, 11), mode="circular"))),
    "pad circular 2d (2,3)": (2, _plain(lambda x: F.pad(x, (1, 1, 2, 3), mode="circular"))),
    "nn.Conv2d padding_mode reflect": (2, ((lambda gen, dtype: []), _reflect_conv)),
}
INTERP_CASES = {
    "nearest size 17": (1, _plain(lambda x: F.interpolate(x, size=17))),
    "nearest scale 2": (2, _plain(lambda x: F.interpolate(x, scale_factor=2))),
    "nearest scale 0.6": (1, _plain(lambda x: F.interpolate(x, scale_factor=0.6))),
    "nearest-exact scale 1.7": (2, _plain(lambda x: F.interpolate(x, scale_factor=(1.7, 1.3), mode="nearest-exact"))),
    "linear size 23": (1, _plain(lambda x: F.interpolate(x, size=23, mode="linear"))),
    "linear ac size 23": (1, _plain(lambda x: F.interpolate(x, size=23, mode="linear", align_corners=True))),
    "linear scale 0.7 recompute": (1, _plain(lambda x: F.interpolate(x, scale_factor=0.7, mode="linear",
                                                                     recompute_scale_factor=True))),
    "bilinear scale 2.5": (2, _plain(lambda x: F.interpolate(x, scale_factor=2.5, mode="bilinear"))),
    "bilinear ac size (5,7)": (2, _plain(lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True))),
    "trilinear scale (1.5,2,0.5)": (3, _plain(lambda x: F.interpolate(x, scale_factor=(1.5, 2, 0.5), mode="trilinear"))),
    "area size 4": (2, _plain(lambda x: F.interpolate(x, size=(4, 3), mode="area"))),
    "bicubic scale 2.5": (2, _plain(lambda x: F.interpolate(x, scale_factor=2.5, mode="bicubic"))),
    "bicubic ac size (4,7)": (2, _plain(lambda x: F.interpolate(x, size=(4, 7), mode="bicubic", align_corners=True))),
}
CASES = {**CONV_CASES, **POOL_CASES, **PAD_CASES, **INTERP_CASES}


def _input(nd, n, dtype, gen):
    """[B=2, C=3, n, ...] with the other spatial dims small."""
    return torch.randn((2, 3, n) + (5, 4)[: nd - 1], generator=gen, dtype=dtype)


def _check_case(name, nd, make, op, sizes, dtype, rank, mesh=None, placements=None, device="cpu"):
    """``rank``: this rank's coordinate along the sharding mesh dim (the last mesh dim)."""
    from meshshard.distributed import Shard, all_reduce, default_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = default_device_mesh() if mesh is None else mesh
    placements = (Shard(2),) if placements is None else placements

    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    x = _input(nd, sum(sizes), dtype, gen).to(device)
    params = [p.to(device) for p in make(gen, dtype)]
    off = sum(sizes[:rank])
    x_local = x.narrow(2, off, sizes[rank]).clone().requires_grad_()
    ps = [p.clone().requires_grad_() for p in params]
    st = ShardTensor.from_local(x_local, mesh, placements, sharding_shapes={mesh.ndim - 1: list(sizes)})
    out = op(st, *ps)
    full = out.full_tensor()
    xr = x.clone().requires_grad_()
    prs = [p.clone().requires_grad_() for p in params]
    ref = op(xr, *prs)
    tol = TOL[dtype]
    assert full.shape == ref.shape, f"{name} {sizes}: shape {tuple(full.shape)} vs {tuple(ref.shape)}"
    assert torch.allclose(full, ref, **tol), f"{name} {sizes}: values differ by {(full - ref).abs().max()}"
    proj = torch.randn(ref.shape, generator=gen, dtype=dtype).to(device)
    (full * proj).sum().backward()
    (ref * proj).sum().backward()
    want = xr.grad.narrow(2, off, sizes[rank])
    assert torch.allclose(x_local.grad, want, **tol), f"{name} {sizes}: input grad differs by {(x_local.grad - want).abs().max()}"
    for i, (p, pr) in enumerate(zip(ps, prs)):
        g = p.grad.clone()
        for m in range(mesh.ndim):  # weights: per-rank shares over the whole mesh (the gradient rule)
            all_reduce(g, group=mesh.get_group(m))
        assert torch.allclose(g, pr.grad, **tol), f"{name} {sizes}: param {i} grad differs by {(g - pr.grad).abs().max()}"


def _refusals(rank, sizes):
    """Ops a sharded grid cannot run exactly raise clearly, on every rank, before any exchange."""
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor

    x = torch.randn(2, 3, sizes[rank], 4, dtype=torch.float64)
    st = ShardTensor.from_local(x, default_device_mesh(), (Shard(2),), sharding_shapes=list(sizes))
    _expect(NotImplementedError, lambda: F.max_pool2d(st, 2, return_indices=True), "max_pool2d_with_indices")
    _expect(NotImplementedError, lambda: F.interpolate(st, scale_factor=2, mode="bilinear", antialias=True),
            "antialias")
    _expect(ValueError, lambda: F.pad(st, (0, 0, 11, 0), mode="reflect"), "reflect padding", "11")
    _expect(ValueError, lambda: F.conv2d(st, torch.randn(1, 3, 12, 1, dtype=torch.float64)), "extent 12")
    by_channel = ShardTensor.from_local(torch.randn(2, sizes[rank], 5, dtype=torch.float64), default_device_mesh(),
                                        (Shard(1),), sharding_shapes=list(sizes))
    _expect(NotImplementedError, lambda: F.conv1d(by_channel, torch.randn(1, 11, 3, dtype=torch.float64)),
            "channel dim")


def _dp_by_domain(rank):
    """A 2 x 2 (dp, domain) mesh, Replicate on dp and Shard(2) on domain: the exchange runs inside
    each domain group."""
    from meshshard.distributed import Replicate, Shard, init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
    coord = mesh.get_local_rank(1)
    for name in ("conv2d k3 s2 p1", "conv_transpose2d k3 s2 p1 d2", "avg_pool2d k3 s2 p1 ceil", "pad circular 2d (2,3)",
                 "bilinear scale 2.5"):
        nd, (make, op) = CASES[name]
        _check_case(name, nd, make, op, [2, 9], torch.float64, coord, mesh, (Replicate(), Shard(2)))
    return 5


def _replicated_weights(rank, sizes):
    """Weights given as replicated ShardTensors get the full gradient (backward sums the ranks'
    parts), the reference tests' convention; the input gradient keeps the input's spec."""
    from meshshard.distributed import Replicate, Shard, default_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = default_device_mesh()
    gen = torch.Generator().manual_seed(5)
    img = torch.randn(2, 3, sum(sizes), 6, generator=gen, dtype=torch.float64)
    w0, b0 = torch.randn(4, 3, 3, 2, generator=gen, dtype=torch.float64), torch.randn(4, generator=gen, dtype=torch.float64)
    wr, br, xr = w0.clone().requires_grad_(), b0.clone().requires_grad_(), img.clone().requires_grad_()
    F.conv2d(xr, wr, br, 2, 1).mean().backward()
    w = ShardTensor.from_local(w0.clone(), mesh, (Replicate(),)).requires_grad_()
    b = ShardTensor.from_local(b0.clone(), mesh, (Replicate(),)).requires_grad_()
    off = sum(sizes[:rank])
    x = ShardTensor.from_local(img.narrow(2, off, sizes[rank]).clone(), mesh, (Shard(2),), sharding_shapes=list(sizes))
    x.requires_grad_(True)
    F.conv2d(x, w, b, 2, 1).mean().backward()
    assert x.grad._spec == x._spec
    assert torch.allclose(x.grad.to_local(), xr.grad.narrow(2, off, sizes[rank]), **TOL[torch.float64])
    for got, want in ((w.grad, wr.grad), (b.grad, br.grad)):
        assert isinstance(got, ShardTensor) and got.placements == (Replicate(),)
        assert torch.allclose(got.to_local(), want, **TOL[torch.float64]), (got.to_local() - want).abs().max()


# conv2d of an image split in height and width: (mesh shape, height shards, width shards), with
# empty and one-row shards
SEVERAL_DIMS = {1: [((1, 1), [7], [6])], 2: [((1, 2), [9], [4, 1]), ((2, 1), [1, 7], [8])],
                3: [((1, 3), [6], [2, 0, 5]), ((3, 1), [2, 3, 3], [5])],
                4: [((2, 2), [3, 6], [5, 0]), ((2, 2), [4, 4], [1, 6])]}
SEVERAL_DIMS_CONV = [(3, 1, 1, 1, 1, torch.float64), (3, 2, 1, 1, 1, torch.float64), (5, 1, 2, 2, 1, torch.float64),
                     (2, 3, 0, 1, 1, torch.float64), (3, 1, "same", 1, 3, torch.float64), (4, 2, 3, 1, 1, torch.float32)]


def _several_dims(world):
    """F.conv2d on (Shard(2), Shard(3)) over a 2-D mesh: values, input and weight gradients."""
    from meshshard.distributed import Shard, all_reduce, init_device_mesh
    from meshshard.tensor import ShardTensor

    done = 0
    for shape, hs, ws in SEVERAL_DIMS[world]:
        mesh = init_device_mesh("cpu", shape)
        ch, cw = mesh.get_local_rank(0), mesh.get_local_rank(1)
        oh, ow = sum(hs[:ch]), sum(ws[:cw])
        for k, stride, pad, dil, groups, dtype in SEVERAL_DIMS_CONV:
            gen = torch.Generator().manual_seed(done)
            img = torch.randn(2, 3, sum(hs), sum(ws), generator=gen, dtype=dtype)
            w0 = torch.randn(6, 3 // groups, k, k, generator=gen, dtype=dtype)
            b0 = torch.randn(6, generator=gen, dtype=dtype)
            xr, wr, br = img.clone().requires_grad_(), w0.clone().requires_grad_(), b0.clone().requires_grad_()
            ref = F.conv2d(xr, wr, br, stride, pad, dil, groups)
            xl = img[:, :, oh:oh + hs[ch], ow:ow + ws[cw]].clone().requires_grad_()
            x = ShardTensor.from_local(xl, mesh, (Shard(2), Shard(3)), sharding_shapes={0: hs, 1: ws})
            wl, bl = w0.clone().requires_grad_(), b0.clone().requires_grad_()
            full = F.conv2d(x, wl, bl, stride, pad, dil, groups).full_tensor()
            tol, case = TOL[dtype], f"conv2d k{k} s{stride} p{pad} d{dil} g{groups} on {shape} {hs}x{ws}"
            assert full.shape == ref.shape, f"{case}: shape {tuple(full.shape)} vs {tuple(ref.shape)}"
            assert torch.allclose(full, ref, **tol), f"{case}: values differ by {(full - ref).abs().max()}"
            proj = torch.randn(ref.shape, generator=gen, dtype=dtype)
            (ref * proj).sum().backward()
            (full * proj).sum().backward()
            want = xr.grad[:, :, oh:oh + hs[ch], ow:ow + ws[cw]]
            assert torch.allclose(xl.grad, want, **tol), f"{case}: input grad differs by {(xl.grad - want).abs().max()}"
            for got, ref_grad in ((wl.grad.clone(), wr.grad), (bl.grad.clone(), br.grad)):
                all_reduce(got)  # plain weights: per-rank partial sums over the whole mesh
                assert torch.allclose(got, ref_grad, **tol), f"{case}: weight grad differs by {(got - ref_grad).abs().max()}"
            done += 1
    return done


def _all_cases(rank, world):
    from meshshard.distributed import validation

    _refusals(rank, SIZES[world][0])
    _replicated_weights(rank, SIZES[world][-1])
    done = _several_dims(world)
    with validation(False):  # the inputs match by construction; the check's all-gathers would double the time
        for sizes in SIZES[world]:
            for i, (name, (nd, (make, op))) in enumerate(CASES.items()):
                for dtype in (torch.float64, torch.float32) if i % 3 == 0 else (torch.float64,):
                    _check_case(name, nd, make, op, sizes, dtype, rank)
                    done += 1
    return done + (_dp_by_domain(rank) if world == 4 else 0)


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_grid_ops_match_one_process(world):
    counts = run_distributed(_all_cases, world, timeout=TIMEOUT - 20)
    several = len(SEVERAL_DIMS[world]) * len(SEVERAL_DIMS_CONV)
    assert counts[0] == several + len(SIZES[world]) * (len(CASES) + (len(CASES) + 2) // 3) + (5 if world == 4 else 0)


# Every grid family on a tensor split along two dims by the two dims of a 2-D mesh
# ((Shard(a), Shard(b))): per world size, (mesh shape, rows per coordinate along a, along b),
# uneven, with empty and one-row shards. Inputs: "img" [2, 3, 9, 6] split in height and width,
# "vol" [2, 2, 9, 6, 4] split in its first two spatial dims, "seq" [9, 3, 6] split in batch and
# length.
TWO_DIMS = {1: [((1, 1), (9,), (6,))],
            3: [((1, 3), (9,), (2, 0, 4)), ((3, 1), (2, 1, 6), (6,))],
            4: [((2, 2), (3, 6), (5, 1)), ((2, 2), (4, 5), (0, 6)), ((2, 2), (1, 8), (2, 4))]}
_INPUTS = {"img": ((2, 3, 9, 6), (2, 3)), "vol": ((2, 2, 9, 6, 4), (2, 3)), "seq": ((9, 3, 6), (0, 2))}


def _weights(*shapes):
    return lambda gen, dtype: [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]


def _none(gen, dtype):
    return []


TWO_DIMS_CASES = {
    # name: (input, params, op, float32 too)
    "conv_transpose2d k3 s2 p1 op1": ("img", _weights((3, 4, 3, 3), (4,)),
                                      lambda x, w, b: F.conv_transpose2d(x, w, b, 2, 1, 1), True),
    "conv_transpose2d k2 s3 (unreached outputs)": ("img", _weights((3, 4, 2, 2), (4,)),
                                                   lambda x, w, b: F.conv_transpose2d(x, w, b, 3), False),
    "conv_transpose2d k3 s(1,2) p(2,0) d2 g3": ("img", _weights((3, 2, 3, 3), (6,)),
                                                lambda x, w, b: F.conv_transpose2d(x, w, b, (1, 2), (2, 0), 0, 3, 2),
                                                False),
    "conv_transpose3d k3 s2 p1": ("vol", _weights((2, 3, 3, 3, 3), (3,)),
                                  lambda x, w, b: F.conv_transpose3d(x, w, b, 2, 1), False),
    "conv_transpose1d batch x length k3 s2": ("seq", _weights((3, 2, 3), (2,)),
                                              lambda x, w, b: F.conv_transpose1d(x, w, b, 2, 1, 1), False),
    "conv1d batch x length k3 p1": ("seq", _weights((2, 3, 3), (2,)), lambda x, w, b: F.conv1d(x, w, b, 1, 1), False),
    "conv3d k3 s2 p1": ("vol", _weights((3, 2, 3, 3, 3), (3,)), lambda x, w, b: F.conv3d(x, w, b, 2, 1), False),
    "max_pool2d k3 s2 p1": ("img", _none, lambda x: F.max_pool2d(x, 3, 2, 1), True),
    "max_pool2d k2 d2 ceil": ("img", _none, lambda x: F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True), False),
    "max_pool3d k2": ("vol", _none, lambda x: F.max_pool3d(x, 2), False),
    "max_pool1d batch x length k3 s2 p1": ("seq", _none, lambda x: F.max_pool1d(x, 3, 2, 1), False),
    "avg_pool2d k3 s2 p1 ceil no-pad-count": ("img", _none,
                                              lambda x: F.avg_pool2d(x, 3, 2, 1, True, False), True),
    "avg_pool2d k(3,2) p(1,1) ceil": ("img", _none, lambda x: F.avg_pool2d(x, (3, 2), 2, (1, 1), True), False),
    "avg_pool2d k2 divisor": ("img", _none, lambda x: F.avg_pool2d(x, 2, 1, 1, divisor_override=3), False),
    "avg_pool3d k3 s2 p1": ("vol", _none, lambda x: F.avg_pool3d(x, 3, 2, 1), False),
    "avg_pool1d batch x length k4 s3 p2 ceil": ("seq", _none, lambda x: F.avg_pool1d(x, 4, 3, 2, True, False), False),
    "adaptive_avg_pool2d (4,5)": ("img", _none, lambda x: F.adaptive_avg_pool2d(x, (4, 5)), True),
    "adaptive_avg_pool2d (3,3) even windows": ("img", _none, lambda x: F.adaptive_avg_pool2d(x, 3), False),
    "adaptive_avg_pool2d (13,None)": ("img", _none, lambda x: F.adaptive_avg_pool2d(x, (13, None)), False),
    "adaptive_max_pool2d (7,4)": ("img", _none, lambda x: F.adaptive_max_pool2d(x, (7, 4)), False),
    "adaptive_max_pool2d 1 (global)": ("img", _none, lambda x: F.adaptive_max_pool2d(x, 1), False),
    "adaptive_avg_pool3d (4,2,3)": ("vol", _none, lambda x: F.adaptive_avg_pool3d(x, (4, 2, 3)), False),
    "adaptive_max_pool1d batch x length 4": ("seq", _none, lambda x: F.adaptive_max_pool1d(x, 4), False),
    "pad constant value": ("img", _none, lambda x: F.pad(x, (1, 2, 3, 1), value=0.5), True),
    "pad constant crop": ("img", _none, lambda x: F.pad(x, (-2, 1, 1, -3)), False),
    "pad reflect": ("img", _none, lambda x: F.pad(x, (3, 2, 4, 8), mode="reflect"), False),
    "pad replicate 3d": ("vol", _none, lambda x: F.pad(x, (1, 0, 2, 7, 5, 1), mode="replicate"), False),
    "pad circular": ("img", _none, lambda x: F.pad(x, (6, 1, 2, 9), mode="circular"), False),
    "pad constant batch x length": ("seq", _none, lambda x: F.pad(x, (2, 1, 0, 0, 1, 3)), False),
    "nn.Conv2d padding_mode reflect": ("img", _none, _reflect_conv, False),
    "nearest scale 2": ("img", _none, lambda x: F.interpolate(x, scale_factor=2), True),
    "nearest size (5,13)": ("img", _none, lambda x: F.interpolate(x, size=(5, 13)), False),
    "nearest-exact scale (1.7,1.3)": ("img", _none,
                                      lambda x: F.interpolate(x, scale_factor=(1.7, 1.3), mode="nearest-exact"), False),
    "bilinear scale 2.5": ("img", _none, lambda x: F.interpolate(x, scale_factor=2.5, mode="bilinear"), True),
    "bilinear align_corners size (5,7)": ("img", _none, lambda x: F.interpolate(x, size=(5, 7), mode="bilinear",
                                                                                align_corners=True), False),
    "bilinear scale 0.6 recompute": ("img", _none, lambda x: F.interpolate(x, scale_factor=0.6, mode="bilinear",
                                                                           recompute_scale_factor=True), False),
    "trilinear align_corners scale (1.5,2,0.5)": ("vol", _none, lambda x: F.interpolate(
        x, scale_factor=(1.5, 2, 0.5), mode="trilinear", align_corners=True), False),
    "linear batch x length size 11": ("seq", _none, lambda x: F.interpolate(x, size=11, mode="linear"), False),
    "area size (4,5)": ("img", _none, lambda x: F.interpolate(x, size=(4, 5), mode="area"), False),
    "bicubic scale (2.5,1.5)": ("img", _none, lambda x: F.interpolate(x, scale_factor=(2.5, 1.5), mode="bicubic"),
                                True),
    "bicubic align_corners size (4,11)": ("img", _none, lambda x: F.interpolate(x, size=(4, 11), mode="bicubic",
                                                                                align_corners=True), False),
}


def _two_dims(rank, world):
    """Every case of TWO_DIMS_CASES on every layout of TWO_DIMS[world], then the refusals."""
    from meshshard.distributed import Shard, init_device_mesh, validation
    from meshshard.tensor import ShardTensor
    from tests.tensor._ops._mesh2d import check_split_in_two_dims

    done = 0
    with validation(False):  # the inputs match by construction
        for shape, s0, s1 in TWO_DIMS[world]:
            for i, (name, (kind, make, op, single)) in enumerate(TWO_DIMS_CASES.items()):
                full_shape, dims = _INPUTS[kind]
                for dtype in (torch.float64, torch.float32) if single else (torch.float64,):
                    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
                    x = torch.randn(full_shape, generator=gen, dtype=dtype)
                    check_split_in_two_dims(f"{name} {dtype}", op, x, make(gen, dtype), shape, (s0, s1), dims, seed=i)
                    done += 1
    mesh = init_device_mesh("cpu", TWO_DIMS[world][0][0])
    s0, s1 = TWO_DIMS[world][0][1:]
    local = torch.randn(2, 3, s0[mesh.get_local_rank(0)], s1[mesh.get_local_rank(1)], dtype=torch.float64)
    st = ShardTensor.from_local(local, mesh, (Shard(2), Shard(3)), sharding_shapes={0: list(s0), 1: list(s1)})
    _expect(NotImplementedError, lambda: F.interpolate(st, scale_factor=2, mode="bicubic", antialias=True),
            "antialias")
    _expect(NotImplementedError, lambda: F.max_pool2d(st, 2, return_indices=True), "max_pool2d_with_indices")
    _expect(ValueError, lambda: F.pad(st, (0, 6, 0, 0), mode="reflect"), "reflect padding", "6")
    return done


@pytest.mark.timeout(TIMEOUT)
@pytest.mark.parametrize("world", sorted(TWO_DIMS))
def test_grid_ops_split_in_two_dims_match_one_process(world):
    counts = run_distributed(_two_dims, world, timeout=TIMEOUT - 20)
    per_layout = sum(2 if case[3] else 1 for case in TWO_DIMS_CASES.values())
    assert counts == [per_layout * len(TWO_DIMS[world])] * world
