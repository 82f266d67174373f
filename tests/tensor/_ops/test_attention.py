"""Ring attention (``F.scaled_dot_product_attention`` on ShardTensors sharded along the sequence /
points dim), a replicated query against sharded keys and values (Transolver-style tokens attending
to sharded points; log-sum-exp merge) and a Transolver-style slice-attention block on 1-4 gloo
ranks, uneven shards with a zero-row rank, q and k/v of different lengths and layouts: values and gradients of q, k, v (and the
block's weights) against one process, float64 1e-10 and float32 1e-5; clear errors for what is
not supported."""
import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
Q_SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 4]}
K_SIZES = {1: [6], 2: [5, 1], 3: [0, 3, 3], 4: [2, 0, 2, 2]}
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def _rows(t, sizes, rank, dim):
    start = sum(sizes[:rank])
    return t.narrow(dim, start, sizes[rank])


def _close(a, b, what, dtype):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL[dtype]), f"{what}: max diff {(a - b).abs().max().item()}"


def _sdpa_case(rank, world, mesh, dtype, kv_replicated=False, hk=2, device="cpu", **kw):
    from meshshard.distributed import Replicate, Shard
    from meshshard.tensor import ShardTensor

    qs, ks = Q_SIZES[world], K_SIZES[world]
    lq, lk = sum(qs), sum(ks)
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 2 * (2 // hk) if kw.get("enable_gqa") else 2, lq, 3, generator=g, dtype=dtype)
    k = torch.randn(2, hk, lk, 3, generator=g, dtype=dtype)
    v = torch.randn(2, hk, lk, 4, generator=g, dtype=dtype)
    gout = torch.randn(q.shape[:-1] + (4,), generator=g, dtype=dtype)
    q, k, v, gout = (t.to(device) for t in (q, k, v, gout))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, **kw)
    (ref * gout).sum().backward()

    lq_ = _rows(q, qs, rank, 2).clone().requires_grad_()
    if kv_replicated:
        lk_, lv_ = k.clone().requires_grad_(), v.clone().requires_grad_()
        sk = ShardTensor.from_local(lk_, mesh, (Replicate(),))
        sv = ShardTensor.from_local(lv_, mesh, (Replicate(),))
    else:
        lk_, lv_ = (_rows(t, ks, rank, 2).clone().requires_grad_() for t in (k, v))
        sk = ShardTensor.from_local(lk_, mesh, (Shard(2),), sharding_shapes={0: ks})
        sv = ShardTensor.from_local(lv_, mesh, (Shard(2),), sharding_shapes={0: ks})
    sq = ShardTensor.from_local(lq_, mesh, (Shard(2),), sharding_shapes={0: qs})
    out = F.scaled_dot_product_attention(sq, sk, sv, **kw)
    assert out.placements == (Shard(2),) and out.shard_sizes() == qs
    (out.to_local() * _rows(gout, qs, rank, 2)).sum().backward()
    what = f"{dtype} {sorted(kw)} kv_replicated={kv_replicated}"
    _close(out.to_local(), _rows(ref.detach(), qs, rank, 2), f"output {what}", dtype)
    _close(lq_.grad, _rows(full[0].grad, qs, rank, 2), f"dq {what}", dtype)
    if kv_replicated:  # replicated k/v: every rank holds the whole gradient
        _close(lk_.grad, full[1].grad, f"dk {what}", dtype)
        _close(lv_.grad, full[2].grad, f"dv {what}", dtype)
    else:
        _close(lk_.grad, _rows(full[1].grad, ks, rank, 2), f"dk {what}", dtype)
        _close(lv_.grad, _rows(full[2].grad, ks, rank, 2), f"dv {what}", dtype)


def _replicated_q_case(rank, world, mesh, dtype, lq=3, hk=2, mesh_dim=0, **kw):
    """A replicated query (a few tokens) against K/V sharded along dim -2 (many points): the output
    is Replicate; every rank's dk / dv are its rows of one process's, and the query's gradient (the
    sum over the ranks' key blocks) is whole on every rank."""
    from meshshard.distributed import Replicate, Shard
    from meshshard.tensor import ShardTensor

    ks = K_SIZES[world] if mesh.ndim == 1 else [3, 2]
    coord = mesh.get_local_rank(mesh_dim)
    lk = sum(ks)
    g = torch.Generator().manual_seed(13)
    q = torch.randn(2, 2, lq, 3, generator=g, dtype=dtype)
    k = torch.randn(2, hk, lk, 3, generator=g, dtype=dtype)
    v = torch.randn(2, hk, lk, 4, generator=g, dtype=dtype)
    gout = torch.randn(2, 2, lq, 4, generator=g, dtype=dtype)
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, **kw)
    (ref * gout).sum().backward()
    placements = tuple(Shard(2) if m == mesh_dim else Replicate() for m in range(mesh.ndim))
    lq_ = q.clone().requires_grad_()
    lk_, lv_ = (_rows(t, ks, coord, 2).clone().requires_grad_() for t in (k, v))
    sq = ShardTensor.from_local(lq_, mesh, (Replicate(),) * mesh.ndim)
    sk, sv = (ShardTensor.from_local(t, mesh, placements, sharding_shapes={mesh_dim: ks}) for t in (lk_, lv_))
    out = F.scaled_dot_product_attention(sq, sk, sv, **kw)
    assert out.placements == (Replicate(),) * mesh.ndim
    (out.to_local() * gout).sum().backward()
    what = f"replicated query {dtype} {sorted(kw)} mesh {tuple(mesh.shape)}"
    _close(out.to_local(), ref.detach(), f"output {what}", dtype)
    _close(lq_.grad, full[0].grad, f"dq {what}", dtype)
    _close(lk_.grad, _rows(full[1].grad, ks, coord, 2), f"dk {what}", dtype)
    _close(lv_.grad, _rows(full[2].grad, ks, coord, 2), f"dv {what}", dtype)


class _TokensToPoints(torch.nn.Module):
    """Transolver-style: a few tokens (summed over all points, so replicated) attend to the many
    sharded points (q from the tokens, k / v from the points), and the result goes back to the points."""

    def __init__(self, c, g):
        super().__init__()
        self.slice = torch.nn.Linear(c, g)
        self.q, self.k, self.v = (torch.nn.Linear(c, c) for _ in range(3))

    def forward(self, x):  # x: [B, N, C], N sharded
        w = torch.softmax(self.slice(x), dim=-1)                               # [B, N, G]
        tokens = torch.einsum("bnc,bng->bgc", x, w)                           # replicated [B, G, C]
        att = F.scaled_dot_product_attention(self.q(tokens), self.k(x), self.v(x))  # [B, G, C], replicated
        return x * torch.einsum("bgc,bng->bnc", att, w).tanh()                # back to the points


def _tokens_to_points_case(rank, world, mesh):
    from meshshard.distributed import Shard, all_reduce
    from meshshard.tensor import ShardTensor

    sizes = Q_SIZES[world]
    torch.manual_seed(1)
    block = _TokensToPoints(4, 3).double()
    x = torch.randn(2, sum(sizes), 4, dtype=torch.float64)
    xf = x.clone().requires_grad_()
    ref = block(xf)
    (ref ** 2).sum().backward()
    ref_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    xl = _rows(x, sizes, rank, 1).clone().requires_grad_()
    out = block(ShardTensor.from_local(xl, mesh, (Shard(1),), sharding_shapes={0: sizes}))
    assert out.placements == (Shard(1),)
    (out.to_local() ** 2).sum().backward()
    _close(out.to_local(), _rows(ref.detach(), sizes, rank, 1), "tokens -> points output", torch.float64)
    _close(xl.grad, _rows(xf.grad, sizes, rank, 1), "tokens -> points dx", torch.float64)
    for p, r in zip(block.parameters(), ref_grads):
        # as in _transolver_case: one rule, the shares sum to the whole gradient
        _close(all_reduce(p.grad.clone()), r, "tokens -> points weight grad", torch.float64)


def _masks(world):
    lq, lk = sum(Q_SIZES[world]), sum(K_SIZES[world])
    g = torch.Generator().manual_seed(3)
    boolean = torch.rand(lq, lk, generator=g) > 0.4
    boolean[1] = False  # a row with every key masked gives 0, as in torch
    additive = torch.randn(2, 1, lq, lk, generator=g, dtype=torch.float64)
    return boolean, additive


class _SliceAttention(torch.nn.Module):
    """Transolver's physics attention: points -> G slice tokens (softmax over slices, weighted sums
    over all points), attention among the tokens, tokens -> points."""

    def __init__(self, c, g):
        super().__init__()
        self.slice = torch.nn.Linear(c, g)
        self.q, self.k, self.v = (torch.nn.Linear(c, c) for _ in range(3))
        self.proj = torch.nn.Linear(c, c)
        self.norm = torch.nn.LayerNorm(c)

    def forward(self, x):  # x: [B, N, C], N sharded
        w = torch.softmax(self.slice(self.norm(x)) / 0.5, dim=-1)            # [B, N, G], softmax over slices
        mass = torch.einsum("bng->bg", w)                                      # sums over all points
        tokens = torch.einsum("bnc,bng->bgc", x, w)
        tokens = torch.einsum("bgc,bg->bgc", tokens, 1.0 / (mass + 1e-5))      # replicated [B, G, C]
        att = F.scaled_dot_product_attention(self.q(tokens), self.k(tokens), self.v(tokens))
        return x + self.proj(torch.einsum("bgc,bng->bnc", att, w))           # back to the points


def _transolver_case(rank, world, mesh):
    from meshshard.distributed import Shard, all_reduce
    from meshshard.tensor import ShardTensor

    sizes = Q_SIZES[world]
    torch.manual_seed(0)
    block = _SliceAttention(5, 3).double()
    x = torch.randn(2, sum(sizes), 5, dtype=torch.float64)
    xf = x.clone().requires_grad_()
    ref = block(xf)
    (ref ** 2).sum().backward()
    ref_grads = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    xl = _rows(x, sizes, rank, 1).clone().requires_grad_()
    out = block(ShardTensor.from_local(xl, mesh, (Shard(1),), sharding_shapes={0: sizes}))
    assert out.placements == (Shard(1),)
    (out.to_local() ** 2).sum().backward()
    _close(out.to_local(), _rows(ref.detach(), sizes, rank, 1), "transolver output", torch.float64)
    _close(xl.grad, _rows(xf.grad, sizes, rank, 1), "transolver dx", torch.float64)
    for p, r in zip(block.parameters(), ref_grads):
        # one rule for every parameter, on sharded points or replicated slice tokens alike: the
        # ranks' shares sum to the whole gradient
        _close(all_reduce(p.grad.clone()), r, "transolver weight grad", torch.float64)


def _mesh2d_case(rank):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
    dom = mesh.get_local_rank(1)
    qs, ks = [0, 5], [3, 2]
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 2, sum(s), 3, generator=g, dtype=torch.float64) for s in (qs, ks, ks))
    full = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = F.scaled_dot_product_attention(*full, is_causal=True)
    ref.sum().backward()
    local = [_rows(t, s, dom, 2).clone().requires_grad_() for t, s in zip((q, k, v), (qs, ks, ks))]
    sts = [ShardTensor.from_local(t, mesh, (Replicate(), Shard(2)), sharding_shapes={1: s})
           for t, s in zip(local, (qs, ks, ks))]
    out = F.scaled_dot_product_attention(*sts, is_causal=True)
    out.to_local().sum().backward()
    _close(out.to_local(), _rows(ref.detach(), qs, dom, 2), "2-D mesh output", torch.float64)
    for t, r, s, name in zip(local, full, (qs, ks, ks), "qkv"):
        _close(t.grad, _rows(r.grad, s, dom, 2), f"2-D mesh d{name}", torch.float64)


def _check(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    boolean, additive = _masks(world)
    for dtype in (torch.float64, torch.float32):
        _sdpa_case(rank, world, mesh, dtype)
        _sdpa_case(rank, world, mesh, dtype, is_causal=True)
    _sdpa_case(rank, world, mesh, torch.float64, attn_mask=boolean)
    _sdpa_case(rank, world, mesh, torch.float64, attn_mask=additive, scale=0.3)
    _sdpa_case(rank, world, mesh, torch.float64, attn_mask=boolean, is_causal=False, kv_replicated=True)
    _sdpa_case(rank, world, mesh, torch.float64, hk=1, enable_gqa=True, is_causal=True)
    _transolver_case(rank, world, mesh)
    lk = sum(K_SIZES[world])
    for dtype in (torch.float64, torch.float32):
        _replicated_q_case(rank, world, mesh, dtype)
    _replicated_q_case(rank, world, mesh, torch.float64, lq=lk, is_causal=True)
    key_mask = torch.rand(3, lk, generator=torch.Generator().manual_seed(4)) > 0.5
    key_mask[0] = False  # a token that sees no key gives 0, as in torch
    _replicated_q_case(rank, world, mesh, torch.float64, attn_mask=key_mask)
    _replicated_q_case(rank, world, mesh, torch.float64, attn_mask=torch.randn(2, 1, 3, lk, dtype=torch.float64),
                       scale=0.7)
    _replicated_q_case(rank, world, mesh, torch.float64, hk=1, enable_gqa=True)
    _tokens_to_points_case(rank, world, mesh)

    if world == 4:  # (dp x domain) mesh: the ring runs inside each domain group of global ranks
        _mesh2d_case(rank)
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
        _replicated_q_case(rank, world, mesh2, torch.float64, mesh_dim=1, is_causal=True)
    q = ShardTensor.from_local(torch.randn(Q_SIZES[world][rank], 2, 3), mesh, (Shard(0),),
                               sharding_shapes={0: Q_SIZES[world]})
    _expect(NotImplementedError, lambda: F.scaled_dot_product_attention(q, q, q), "dim -2")
    rq = ShardTensor.from_local(torch.randn(2, 2, 3), mesh, (Replicate(),))
    _expect(NotImplementedError, lambda: F.scaled_dot_product_attention(rq, q, q), "replicated query", "dim -2")
    s = ShardTensor.from_local(torch.randn(1, Q_SIZES[world][rank], 3), mesh, (Shard(1),),
                               sharding_shapes={0: Q_SIZES[world]})
    _expect(NotImplementedError, lambda: F.scaled_dot_product_attention(s, s, s, dropout_p=0.1), "dropout_p")
    _expect(NotImplementedError, lambda: F.scaled_dot_product_attention(s, s.to_local(), s), "plain key")
    r = ShardTensor.from_local(torch.randn(1, 2, 3), mesh, (Replicate(),))
    _expect(ValueError, lambda: F.scaled_dot_product_attention(s, s, r), "same layout")
    return True


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_ring_attention(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
