"""Neighbourhood attention (NATTEN's operator) against a dense reference of NATTEN's definition,
written here with explicit loops over query / key pairs: one process on 1-3-D grids (kernel sizes
1-7, dilations 1-3, causal per dim, strides, even kernels, grouped key heads, grids as small as
kernel * dilation, non-square), then ShardTensors sharded along one spatial dim (1-4 gloo ranks,
uneven shards with thin and empty ones, halos crossing several shards) and along two spatial dims
of a 2 x 2 mesh (uneven on both), values and gradients of q, k, v (float64 1e-10, float32 1e-5);
clear errors for what is not supported."""
import itertools

import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

TIMEOUT = 300
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _close(a, b, what, dtype=torch.float64):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL[dtype]), f"{what}: max diff {(a - b).abs().max().item()}"


# --------------------------------------------------------------------------- NATTEN's definition
def _naive_window_start(index, length, kernel, dilation):
    """Window start of NATTEN's naive CPU kernels (``get_window_start``, odd kernel, stride 1):
    the first of the ``kernel`` keys ``start, start + dilation, ...`` of the query ``index``."""
    ns = kernel // 2
    if dilation <= 1:
        return max(index - ns, 0) + (index + ns >= length) * (length - index - ns - 1)
    if index - ns * dilation < 0:
        return index % dilation
    if index + ns * dilation >= length:
        imodd = index % dilation
        a = (length // dilation) * dilation
        b = length - a
        if imodd < b:
            return length - b + imodd - 2 * ns * dilation
        return a + imodd - kernel * dilation
    return index - ns * dilation


def _pair_rule(x, y, n, kernel, stride, dilation, causal):
    """Whether key ``y`` is in the window of query ``x`` along one dim, NATTEN's rule per pair (as its
    flex-attention mask states it): same dilation group, then in the window of the stride group's
    leader in group coordinates (centred and shifted inside the group; causal: ending at the query)."""
    if x % dilation != y % dilation:
        return False
    g, xi, yi = x % dilation, x // dilation, y // dilation
    group_len = len(range(g, n, dilation))
    if causal:
        leader = min((xi // stride) * stride + stride - 1, group_len - 1)
        return yi <= xi and leader - yi < kernel
    left, right = kernel // 2, kernel - 1 - kernel // 2
    leader = min((xi // stride) * stride + stride // 2, group_len - 1)
    center = min(max(leader, left), group_len - 1 - right)
    return center - left <= yi <= center + right


def _allowed_1d(x, y, n, kernel, stride, dilation, causal):
    if stride == 1 and kernel % 2 == 1 and not causal:
        start = _naive_window_start(x, n, kernel, dilation)
        return y in range(start, start + kernel * dilation, dilation)
    if stride == 1 and causal:  # the query and the kernel - 1 before it in its group
        return y <= x and (x - y) % dilation == 0 and (x - y) // dilation < kernel
    return _pair_rule(x, y, n, kernel, stride, dilation, causal)


def _mask(grid, kernel, stride, dilation, causal):
    """``[N, N]`` bool over the flattened grid (row-major): query row, key column."""
    points = list(itertools.product(*[range(n) for n in grid]))
    m = torch.zeros(len(points), len(points), dtype=torch.bool)
    for a, xs in enumerate(points):
        for b, ys in enumerate(points):
            m[a, b] = all(_allowed_1d(x, y, n, kk, s, d, c)
                          for x, y, n, kk, s, d, c in zip(xs, ys, grid, kernel, stride, dilation, causal))
    return m


def _per_dim(v, nd):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd


def _dense_natten(q, k, v, kernel_size, stride=1, dilation=1, is_causal=False, scale=None):
    """NATTEN's neighbourhood attention as dense masked attention over the flattened grid."""
    nd = q.dim() - 3
    grid = tuple(q.shape[1:1 + nd])
    args = [_per_dim(a, nd) for a in (kernel_size, stride, dilation, is_causal)]
    m = _mask(grid, *args)
    b, hq, hk = q.shape[0], q.shape[-2], k.shape[-2]
    qf, kf, vf = (t.reshape(b, -1, t.shape[-2], t.shape[-1]).transpose(1, 2) for t in (q, k, v))
    kf, vf = kf.repeat_interleave(hq // hk, dim=1), vf.repeat_interleave(hq // hk, dim=1)
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    p = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    out = torch.matmul(p, vf).transpose(1, 2)
    return out.reshape(q.shape[:-1] + (v.shape[-1],))


# --------------------------------------------------------------------------- one process
def test_the_two_statements_of_natten_windows_agree():
    """NATTEN's naive-kernel window start and its per-pair rule give the same windows (odd kernels,
    stride 1), and a non-causal window always holds exactly ``kernel`` keys."""
    for n in range(1, 17):
        for kernel in (1, 3, 5, 7):
            for d in (1, 2, 3, 4):
                if kernel * d > n:
                    continue
                for x in range(n):
                    start = _naive_window_start(x, n, kernel, d)
                    want = set(range(start, start + kernel * d, d))
                    got = {y for y in range(n) if _pair_rule(x, y, n, kernel, 1, d, False)}
                    assert got == want and len(got) == kernel, (n, kernel, d, x, got, want)
                    causal = {y for y in range(n) if _pair_rule(x, y, n, kernel, 1, d, True)}
                    assert causal == {y for y in range(x, -1, -d)[:kernel]}, (n, kernel, d, x)


def test_window_keys_by_hand():
    """Windows written out from the definition: shifted at the borders, dilation groups, causal."""
    from meshshard.tensor._ops.neighborhood import window_keys

    def keys(n, k, s, d, c):
        ky, ok = window_keys(torch.arange(n), n, k, s, d, c)
        return [sorted(int(y) for y, o in zip(r, v) if o) for r, v in zip(ky, ok)]

    assert keys(5, 3, 1, 1, False) == [[0, 1, 2], [0, 1, 2], [1, 2, 3], [2, 3, 4], [2, 3, 4]]
    assert keys(7, 3, 1, 2, False) == [[0, 2, 4], [1, 3, 5], [0, 2, 4], [1, 3, 5], [2, 4, 6], [1, 3, 5], [2, 4, 6]]
    assert keys(5, 3, 1, 1, True) == [[0], [0, 1], [0, 1, 2], [1, 2, 3], [2, 3, 4]]
    assert keys(6, 3, 1, 2, True) == [[0], [1], [0, 2], [1, 3], [0, 2, 4], [1, 3, 5]]
    assert keys(4, 4, 1, 1, False) == [[0, 1, 2, 3]] * 4  # kernel = grid: everything
    assert keys(6, 2, 1, 1, False) == [[0, 1], [0, 1], [1, 2], [2, 3], [3, 4], [4, 5]]  # even: one left
    assert keys(6, 3, 3, 1, False) == [[0, 1, 2]] * 3 + [[3, 4, 5]] * 3  # stride 3: windows of queries 1, 4


ONE_PROCESS = [  # (shape [B, *spatial, H, E], kernel_size, kwargs)
    ((2, 9, 2, 3), 3, {}),
    ((1, 9, 2, 3), 5, dict(dilation=1)),
    ((1, 7, 1, 3), 7, {}),                                      # kernel = grid
    ((1, 10, 2, 3), 3, dict(dilation=3)),                       # kernel * dilation close to the grid
    ((1, 11, 2, 3), 5, dict(dilation=2)),
    ((1, 14, 1, 3), 7, dict(dilation=2)),                       # kernel * dilation = grid
    ((1, 12, 2, 3), 5, dict(dilation=2, is_causal=True)),
    ((1, 9, 2, 3), 3, dict(dilation=3, is_causal=True)),
    ((1, 8, 2, 3), 4, {}),                                      # even kernel (natten allows it)
    ((1, 10, 2, 3), 4, dict(stride=2, dilation=2)),
    ((1, 11, 2, 3), 5, dict(stride=3, is_causal=True)),
    ((1, 12, 2, 3), 1, {}),                                     # the query's own row only
    ((2, 7, 10, 2, 3), (3, 5), dict(dilation=(2, 1))),          # non-square
    ((1, 9, 6, 2, 4), (3, 3), dict(dilation=(3, 2), is_causal=(True, False), scale=0.3)),
    ((1, 5, 8, 1, 3), (5, 7), {}),
    ((1, 6, 9, 2, 3), (5, 3), dict(stride=(2, 3), is_causal=(False, True))),
    ((1, 4, 5, 6, 1, 3), (3, 5, 3), dict(dilation=(1, 1, 2))),  # 3-D
    ((1, 3, 4, 7, 2, 2), (3, 3, 7), dict(is_causal=(True, False, True))),
]


@pytest.mark.parametrize("shape, kernel, kw", ONE_PROCESS)
def test_one_process_equals_the_dense_natten_definition(shape, kernel, kw):
    from meshshard.tensor import neighborhood_attention

    g = torch.Generator().manual_seed(3)
    full = [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3)]
    full[2] = torch.randn(shape[:-1] + (5,), generator=g, dtype=torch.float64)  # head_dim_v != head_dim
    gout = torch.randn(shape[:-1] + (5,), generator=g, dtype=torch.float64)
    ref_in = [t.clone().requires_grad_() for t in full]
    ref = _dense_natten(*ref_in, kernel, **kw)
    (ref * gout).sum().backward()
    got_in = [t.clone().requires_grad_() for t in full]
    out = neighborhood_attention(*got_in, kernel, **kw)
    (out * gout).sum().backward()
    what = f"{shape} kernel {kernel} {kw}"
    _close(out, ref.detach(), what)
    for a, b, name in zip(got_in, ref_in, "qkv"):
        _close(a.grad, b.grad, f"{what} d{name}")
    # float32: the same numbers to float32 precision
    out32 = neighborhood_attention(*[t.float() for t in full], kernel, **kw)
    assert out32.dtype == torch.float32
    _close(out32, ref.detach().float(), f"{what} float32", torch.float32)


def test_shifted_window_sees_exactly_kernel_keys_and_differs_from_a_cut_window():
    """Every non-causal row of the mask holds prod(kernel) keys; at the border the result is not the
    cut-window one (the old operator)."""
    from meshshard.tensor import neighborhood_attention

    m = _mask((7, 9), (3, 5), (1, 1), (2, 1), (False, False))
    assert (m.sum(1) == 15).all()
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 1, 2, generator=g, dtype=torch.float64) for _ in range(3))
    out = neighborhood_attention(q, k, v, 3)
    cut = torch.softmax((q[0, 0, 0] * k[0, :2, 0]).sum(-1) / 2 ** 0.5, 0) @ v[0, :2, 0]
    shifted = torch.softmax((q[0, 0, 0] * k[0, :3, 0]).sum(-1) / 2 ** 0.5, 0) @ v[0, :3, 0]
    _close(out[0, 0, 0], shifted, "first query, shifted window")
    assert not torch.allclose(out[0, 0, 0], cut)


def test_grouped_key_heads_and_natten_spellings():
    from meshshard.tensor.functional import na1d, na2d, na3d, neighborhood_attention

    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 6, 7, 4, 3, generator=g, dtype=torch.float64)
    k, v = (torch.randn(1, 6, 7, 2, 3, generator=g, dtype=torch.float64) for _ in range(2))
    out = na2d(q, k, v, (3, 5), 1, (2, 1), (False, True), 0.5)  # natten's positional order
    _close(out, _dense_natten(q, k, v, (3, 5), 1, (2, 1), (False, True), 0.5), "GQA na2d")
    _close(out, neighborhood_attention(q, k, v, (3, 5), dilation=(2, 1), is_causal=(False, True), scale=0.5), "alias")
    x = torch.randn(1, 5, 1, 2, dtype=torch.float64)
    _close(na1d(x, x, x, 3), _dense_natten(x, x, x, 3), "na1d")
    y = torch.randn(1, 3, 3, 3, 1, 2, dtype=torch.float64)
    _close(na3d(y, y, y, 3), _dense_natten(y, y, y, 3), "na3d")
    _expect(ValueError, lambda: na1d(q, k, v, 3), "na1d", "6")


def test_one_process_errors():
    from meshshard.tensor import neighborhood_attention

    q = torch.randn(1, 6, 5, 2, 3)
    na = neighborhood_attention
    _expect(ValueError, lambda: na(q, q, q, 7), "kernel_size * dilation")
    _expect(ValueError, lambda: na(q, q, q, 3, dilation=2), "kernel_size * dilation")
    _expect(ValueError, lambda: na(q, q, q, (3, 3, 3)), "kernel_size", "3 entries")
    _expect(ValueError, lambda: na(q, q, q, 3, stride=4), "stride")
    _expect(ValueError, lambda: na(q, q, q, 0), "kernel_size")
    _expect(ValueError, lambda: na(q, q, q, 3, 0.5), "stride")  # the old positional scale
    _expect(ValueError, lambda: na(q, q, q, 3, is_causal=1), "is_causal")
    _expect(ValueError, lambda: na(q[0, 0], q[0, 0], q[0, 0], 3), "[B, *spatial, heads, head_dim]")
    _expect(ValueError, lambda: na(q, q[:, :5], q, 3), "share")
    _expect(ValueError, lambda: na(q, torch.randn(1, 6, 5, 3, 3), torch.randn(1, 6, 5, 3, 3), 3), "multiple")
    _expect(ValueError, lambda: na(q, q.double(), q, 3), "dtype")


# --------------------------------------------------------------------------- ShardTensors
SIZES13 = {1: [13], 2: [4, 9], 3: [6, 0, 7], 4: [1, 5, 0, 7]}  # uneven, a thin and an empty shard
SIZES5 = {1: [5], 2: [2, 3], 3: [1, 0, 4], 4: [1, 1, 0, 3]}


def _blocks(full, mesh, dims):
    """This rank's block of ``full``: ``dims`` = {mesh_dim: (tensor_dim, sizes)}."""
    out = full
    for m, (d, sizes) in dims.items():
        c = mesh.get_local_rank(m)
        out = out.narrow(d, sum(sizes[:c]), sizes[c])
    return out


def _sharded_case(mesh, shape, placements, dims, kernel, dtype=torch.float64, hk=None, **kw):
    from meshshard.tensor import ShardTensor, neighborhood_attention

    g = torch.Generator().manual_seed(17)
    kshape = shape[:-2] + ((hk or shape[-2]),) + shape[-1:]
    full = [torch.randn(shape, generator=g, dtype=dtype), torch.randn(kshape, generator=g, dtype=dtype),
            torch.randn(kshape[:-1] + (4,), generator=g, dtype=dtype)]
    gout = torch.randn(shape[:-1] + (4,), generator=g, dtype=dtype)
    ref_in = [t.clone().requires_grad_() for t in full]
    ref = _dense_natten(*ref_in, kernel, **kw)
    (ref * gout).sum().backward()
    local = [_blocks(t, mesh, dims).clone().requires_grad_() for t in full]
    ss = {m: list(sizes) for m, (_, sizes) in dims.items()}
    sts = [ShardTensor.from_local(t, mesh, placements, sharding_shapes=ss) for t in local]
    out = neighborhood_attention(*sts, kernel, **kw)
    assert out.placements == tuple(placements) and out.shape == ref.shape
    (out.to_local() * _blocks(gout, mesh, dims)).sum().backward()
    what = f"{shape} {placements} {ss} kernel {kernel} {kw}"
    _close(out.to_local(), _blocks(ref.detach(), mesh, dims), what, dtype)
    for t, r, name in zip(local, ref_in, "qkv"):
        _close(t.grad, _blocks(r.grad, mesh, dims), f"{what} d{name}", dtype)


def _one_dim_mesh(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor, neighborhood_attention

    mesh = init_device_mesh("cpu", (world,))
    s13, s5 = SIZES13[world], SIZES5[world]
    # 1-D, halos of (kernel - 1) * dilation = 6, 8, 6 rows cross the thin and empty shards
    _sharded_case(mesh, (2, 13, 2, 3), (Shard(1),), {0: (1, s13)}, 7)
    _sharded_case(mesh, (1, 13, 2, 3), (Shard(1),), {0: (1, s13)}, 3, dilation=3)
    _sharded_case(mesh, (1, 13, 2, 3), (Shard(1),), {0: (1, s13)}, 5, dilation=2, is_causal=True)
    _sharded_case(mesh, (1, 13, 2, 3), (Shard(1),), {0: (1, s13)}, 4, stride=2, dilation=3)
    # 2-D sharded along height, then along width (kernel = width: every window shifted)
    _sharded_case(mesh, (1, 13, 4, 2, 3), (Shard(1),), {0: (1, s13)}, (5, 3), dilation=(2, 1),
                  is_causal=(False, True))
    _sharded_case(mesh, (1, 6, 5, 4, 3), (Shard(2),), {0: (2, s5)}, (3, 5), hk=2)  # grouped key heads
    _sharded_case(mesh, (1, 6, 5, 2, 3), (Shard(2),), {0: (2, s5)}, (5, 5), torch.float32, is_causal=(True, False))
    # 3-D sharded along its middle dim
    _sharded_case(mesh, (1, 4, 13, 3, 1, 2), (Shard(2),), {0: (2, s13)}, (3, 3, 3), dilation=(1, 3, 1))
    # replicated ShardTensors: local
    _sharded_case(mesh, (1, 7, 2, 3), (Replicate(),), {}, 3, dilation=2)

    x = ShardTensor.from_local(torch.randn(1, 13, 2, s13[rank]), mesh, (Shard(3),), sharding_shapes={0: s13})
    _expect(NotImplementedError, lambda: neighborhood_attention(x, x, x, 3), "head_dim")
    y = ShardTensor.from_local(torch.randn(1, s13[rank], 2, 3), mesh, (Shard(1),), sharding_shapes={0: s13})
    r = ShardTensor.from_local(torch.randn(1, 13, 2, 3), mesh, (Replicate(),))
    _expect(ValueError, lambda: neighborhood_attention(y, y, r, 3), "one layout")
    _expect(ValueError, lambda: neighborhood_attention(y, y, y.to_local(), 3), "plain")
    return True


def _two_by_two_mesh(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import neighborhood_attention
    from tests.tensor._ops._mesh2d import check_on_dp_domain_mesh

    mesh = init_device_mesh("cpu", (2, 2))
    hw = (Shard(1), Shard(2))
    # an image split in height and width, uneven on both, a thin shard under a 6-row halo
    _sharded_case(mesh, (1, 9, 10, 2, 3), hw, {0: (1, [1, 8]), 1: (2, [7, 3])}, (3, 5), dilation=(3, 2))
    _sharded_case(mesh, (2, 10, 9, 2, 3), hw, {0: (1, [6, 4]), 1: (2, [2, 7])}, (5, 3), dilation=(2, 3),
                  is_causal=(True, False))
    _sharded_case(mesh, (1, 7, 8, 2, 3), hw, {0: (1, [0, 7]), 1: (2, [5, 3])}, 7, is_causal=(False, True))
    _sharded_case(mesh, (1, 7, 8, 2, 3), hw, {0: (1, [4, 3]), 1: (2, [3, 5])}, (3, 5), torch.float32,
                  stride=(1, 2), dilation=(2, 1))
    # 3-D split in two of its dims; batch and height split
    _sharded_case(mesh, (1, 5, 6, 4, 1, 2), (Shard(3), Shard(2)), {1: (2, [2, 4]), 0: (3, [3, 1])}, (3, 3, 3),
                  dilation=(1, 2, 1))
    _sharded_case(mesh, (2, 9, 4, 2, 3), (Shard(0), Shard(1)), {0: (0, [1, 1]), 1: (1, [2, 7])}, (3, 3),
                  dilation=(3, 1))
    # (dp, domain): replicated over dp, uneven over domain
    _sharded_case(mesh, (1, 9, 4, 2, 3), (Replicate(), Shard(1)), {1: (1, [3, 6])}, 3, dilation=(2, 1))
    g = torch.Generator().manual_seed(2)
    fulls = [torch.randn(1, 9, 4, 2, 3, generator=g, dtype=torch.float64) for _ in range(3)]
    check_on_dp_domain_mesh("neighborhood_attention", lambda q, k, v: neighborhood_attention(q, k, v, 3, dilation=(3, 1)),
                            fulls, [5, 4], dim=1)
    return True


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_sharded_along_one_spatial_dim_equals_one_process(world):
    assert run_distributed(_one_dim_mesh, world, timeout=TIMEOUT) == [True] * world


def test_sharded_along_height_and_width_on_a_2x2_mesh():
    assert run_distributed(_two_by_two_mesh, 4, timeout=TIMEOUT) == [True] * 4
