"""ShardTensor on 1-4 gloo ranks with uneven shards (one rank holds zero rows): construction,
redistribution, supported operations and their gradients against the same computation on the
whole tensor (float64, 1e-10), clear errors for mismatched layouts, unsupported ops and bad input
on every rank, the torch.dot handler example, scatter_tensor, and a 2-D (dp x domain) mesh."""
import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 300
SIZES = {1: [7], 2: [0, 7], 3: [2, 0, 5], 4: [1, 3, 0, 4]}  # uneven, with a zero-row rank
TOL = dict(rtol=1e-10, atol=1e-10)


def _data(data_dir, n):
    """Rows of the real DrivAer body points (float64), plus a derived feature, so F=3."""
    pts = np.load(f"{data_dir}/drivaer_body_points.npz")["points"][: n * 97 : 97].astype(np.float64)
    x = torch.from_numpy(pts)
    return (x - x.mean(0)) / x.std(0)


def _offsets(sizes):
    return [sum(sizes[:r]) for r in range(len(sizes))]


def _close(a, b, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL), f"{what}: max diff {(a - b).abs().max().item()}"


def _expect(exc, fn, *words):
    try:
        fn()
    except exc as e:  # noqa: PERF203
        msg = str(e)
        for w in words:
            assert w in msg, f"message {msg!r} lacks {w!r}"
        return
    raise AssertionError(f"expected {exc.__name__}")


def _model(seed):
    torch.manual_seed(seed)
    lin = torch.nn.Linear(3, 4).double()
    ln = torch.nn.LayerNorm(4).double()
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    return lin, ln, b


def _forward(x, t_full, lin, ln, b):
    """The op chain; ``x`` is a ShardTensor or the whole tensor."""
    y = torch.tanh(x) * 2.0 + x * x - 1.5 / (1 + x.abs())    # element-wise, same layout
    y = y + b                                                # plain tensor along features
    y = y * t_full - 0.5                                     # plain global-size tensor: own rows
    h = F.gelu(lin(y))                                       # nn.Linear + activation
    h = ln(h)                                                # LayerNorm over features
    h = torch.cat([h, torch.sigmoid(y)], dim=1)              # cat along features
    h = torch.softmax(h, dim=1)                              # softmax over features
    m = h.mean(0)                                            # mean over the sharded dim (replicated)
    c = h - m                                                # replicated value meets shards
    row = h.sum(dim=1)                                       # row-wise reduction, stays sharded
    loss = (c * c).sum() + 2 * h.mean() + (row * row).sum() + h.sum(0).sum() + torch.relu(x).mean()
    return loss, row


def _ops_check(x_full, sizes, mesh, placements, rank_in_shard, seed):
    import meshshard as ms
    from meshshard.distributed import all_reduce
    from meshshard.tensor import ShardTensor

    off = _offsets(sizes)[rank_in_shard]
    n_own = sizes[rank_in_shard]
    torch.manual_seed(seed + 1)
    t_full = torch.randn(x_full.shape, dtype=torch.float64, requires_grad=True)
    lin, ln, b = _model(seed)
    lin_r, ln_r, b_r = copy.deepcopy(lin), copy.deepcopy(ln), b.detach().clone().requires_grad_()
    t_r = t_full.detach().clone().requires_grad_()

    x_local = x_full[off:off + n_own].clone().requires_grad_()
    st = ShardTensor.from_local(x_local, mesh, placements, sharding_shapes="infer")
    loss, row = _forward(st, t_full, lin, ln, b)
    assert isinstance(loss, ShardTensor) and all(isinstance(p, ms.Replicate) for p in loss.placements)
    assert isinstance(row, ShardTensor) and row.shard_sizes() == list(sizes)
    loss.backward()

    xr = x_full.clone().requires_grad_()
    loss_r, row_r = _forward(xr, t_r, lin_r, ln_r, b_r)
    loss_r.backward()
    _close(loss.to_local(), loss_r.detach(), "loss")
    _close(row.full_tensor().detach(), row_r.detach(), "row-wise sum")
    _close(x_local.grad, xr.grad[off:off + n_own], "grad wrt ShardTensor input")
    # Plain-tensor parameters get per-rank partial gradients; their sum is the exact gradient.
    group = mesh.get_group(placements.index(next(p for p in placements if isinstance(p, ms.Shard))))
    for p, pr, what in [(lin.weight, lin_r.weight, "linear weight"), (lin.bias, lin_r.bias, "linear bias"),
                        (ln.weight, ln_r.weight, "ln weight"), (b, b_r, "bias vector"), (t_full, t_r, "global plain")]:
        g = p.grad.clone()
        all_reduce(g, group=group)
        _close(g, pr.grad, f"all-reduced grad of {what}")

    # A leaf ShardTensor gets a ShardTensor .grad with its own rows.
    leaf = ShardTensor.from_local(x_full[off:off + n_own].clone(), mesh, placements,
                                  sharding_shapes={placements.index(next(p for p in placements if isinstance(p, ms.Shard))): list(sizes)})
    leaf.requires_grad_(True)
    lin.zero_grad()
    loss2, _ = _forward(leaf, t_full, lin, ln, b)
    loss2.backward()
    assert isinstance(leaf.grad, ShardTensor)
    _close(leaf.grad.to_local(), xr.grad[off:off + n_own], "leaf ShardTensor grad")


def _redistribute_checks(x_full, sizes, mesh, rank, world):
    import meshshard as ms
    from meshshard.distributed import Partial, Replicate, Shard
    from meshshard.tensor import ShardTensor
    from meshshard.tensor.spec import chunk_sizes

    n, f = x_full.shape
    off = _offsets(sizes)
    torch.manual_seed(7)
    wt = torch.randn(n, f, dtype=torch.float64)

    def local_rows(lay):
        return x_full[_offsets(lay)[rank]:_offsets(lay)[rank] + lay[rank]]

    # from_local: infer / dict of shapes / list shorthand / chunk (even layout only)
    x_local = local_rows(sizes).clone().requires_grad_()
    st = ShardTensor.from_local(x_local, mesh, (Shard(0),))
    assert st.shape == (n, f) and st.shard_sizes() == sizes and st.offsets() == off[rank]
    assert st.sharding_shapes() == {0: [torch.Size([s, f]) for s in sizes]}
    _close(st.full_tensor().detach(), x_full, "full_tensor (infer)")
    st_d = ShardTensor.from_local(x_local, mesh, (Shard(0),), sharding_shapes={0: [(s, f) for s in sizes]})
    st_l = ShardTensor.from_local(x_local, mesh, (Shard(0),), sharding_shapes=list(sizes))
    assert st_d.shard_sizes() == sizes == st_l.shard_sizes()
    _close(st_l.full_tensor().detach(), x_full, "full_tensor (list)")
    even = torch.arange(world * 2 * f, dtype=torch.float64).reshape(world * 2, f)
    st_c = ShardTensor.from_local(torch.chunk(even, world)[rank].clone(), mesh, (Shard(0),), sharding_shapes="chunk")
    _close(st_c.full_tensor(), even, "full_tensor (chunk)")
    _expect(ValueError, lambda: ShardTensor.from_local(x_local, mesh, (Shard(0),), sharding_shapes=[s + 1 for s in sizes]),
            "sharding_shapes")

    # Shard(0) -> Replicate, gradient = own rows of the replicated gradient
    rep = st.redistribute(placements=(Replicate(),))
    _close(rep.to_local().detach(), x_full, "Shard->Replicate")
    (rep.to_local() * wt).sum().backward()
    _close(x_local.grad, wt[off[rank]:off[rank] + sizes[rank]], "grad Shard->Replicate")

    # Replicate -> Shard(0) on an uneven layout
    new = list(reversed(sizes))
    xr_full = x_full.clone().requires_grad_()
    st_rep = ShardTensor.from_local(xr_full, mesh, (Replicate(),))
    back = st_rep.redistribute(placements=(Shard(0),), sharding_shapes={0: [(s, f) for s in new]})
    _close(back.to_local().detach(), local_rows(new), "Replicate->Shard")
    (back.to_local() * local_rows(new) * 0 + back.to_local() * wt[_offsets(new)[rank]:_offsets(new)[rank] + new[rank]]).sum().backward()
    _close(xr_full.grad, wt, "grad Replicate->Shard (full gradient on every rank)")

    # Shard(0) -> Shard(1) -> Shard(0), values and gradient
    x_local.grad = None
    cols = chunk_sizes(f, world)
    s1 = st.redistribute(placements=(Shard(1),))
    c0 = _offsets(cols)[rank]
    _close(s1.to_local().detach(), x_full[:, c0:c0 + cols[rank]], "Shard(0)->Shard(1)")
    assert s1.shard_sizes() == cols
    s0 = s1.redistribute(placements=(Shard(0),), sharding_shapes=sizes)
    _close(s0.to_local().detach(), x_local.detach(), "Shard(1)->Shard(0)")
    (s1.to_local() * wt[:, c0:c0 + cols[rank]]).sum().backward()
    _close(x_local.grad, wt[off[rank]:off[rank] + sizes[rank]], "grad Shard(0)->Shard(1)")

    # Rebalance: Shard(0) onto another uneven layout (rows move to their new owner)
    x_local.grad = None
    new2 = [(s * 7 + 3) % 5 for s in range(world)]
    new2[-1] += n - sum(new2)
    if new2[-1] < 0:
        new2 = [n] + [0] * (world - 1)
    rb = st.redistribute(placements=(Shard(0),), sharding_shapes={0: [(s, f) for s in new2]})
    assert rb.shard_sizes() == new2 and rb.offsets() == _offsets(new2)[rank]
    _close(rb.to_local().detach(), local_rows(new2), "rebalance")
    _close(rb.full_tensor().detach(), x_full, "rebalance full_tensor")
    (rb.to_local() * wt[_offsets(new2)[rank]:_offsets(new2)[rank] + new2[rank]]).sum().backward()
    _close(x_local.grad, wt[off[rank]:off[rank] + sizes[rank]], "grad rebalance")

    # Partial -> Replicate: sum over ranks; gradient of each contribution = replicated gradient
    contrib = (x_full * (rank + 1)).clone().requires_grad_()
    part = ShardTensor.from_local(contrib, mesh, (Partial(),))
    total = part.redistribute(placements=(Replicate(),)).to_local()
    _close(total.detach(), x_full * sum(range(1, world + 1)), "Partial->Replicate")
    (total * wt).sum().backward()
    _close(contrib.grad, wt, "grad Partial->Replicate")
    _close(part.full_tensor().detach(), x_full * sum(range(1, world + 1)), "Partial full_tensor")

    # Mismatched shard boundaries -> clear error (values would pair wrong rows)
    if world > 1 and new2 != sizes:
        _expect(ValueError, lambda: st + rb, "different layouts")
        _expect(ValueError, lambda: torch.mul(st, rb), "different layouts")
    # Unsupported ops -> NotImplementedError naming the op and the way out
    for fn, name in [(lambda: torch.sort(st, dim=0), "torch.sort"), (lambda: st[0], "__getitem__"),
                     (lambda: torch.softmax(st, dim=0), "softmax"), (lambda: torch.cumsum(st, 0), "torch.cumsum"),
                     (lambda: st.view(-1), "view"), (lambda: torch.matmul(st, st.T), "")]:
        _expect(NotImplementedError, fn, name, "register")
    return st


def _dot_handler_check(x_full, mesh, rank, world, sizes):
    from meshshard.distributed import Partial, Shard
    from meshshard.tensor import ShardTensor

    def dot_handler(func, types, args, kwargs):
        a, b = args
        local = torch.dot(a.to_local(), b.to_local())
        return ShardTensor.from_local(local, a.device_mesh, (Partial(),)).full_tensor()

    va, vb = x_full[:, 0], x_full[:, 1]
    off = _offsets(sizes)[rank]
    la = va[off:off + sizes[rank]].clone().requires_grad_()
    a = ShardTensor.from_local(la, mesh, (Shard(0),))
    b = ShardTensor.from_local(vb[off:off + sizes[rank]].clone(), mesh, (Shard(0),))
    _expect(NotImplementedError, lambda: torch.dot(a, b), "torch.dot", "register_function_handler")
    ShardTensor.register_function_handler(torch.dot, dot_handler)
    d = torch.dot(a, b)
    _close(d.detach(), torch.dot(va, vb), "dot handler")
    d.backward()
    _close(la.grad, vb[off:off + sizes[rank]], "dot handler grad")


def _scatter_checks(x_full, mesh, rank, world, sizes):
    import meshshard.tensor.scatter as scatter_mod
    from meshshard.tensor import scatter_tensor

    seen = []
    real = scatter_mod.scatter_v

    def spy(tensor, sz, dim=0, src=0, group=None):
        seen.append(tuple(tensor.shape))
        return real(tensor, sz, dim=dim, src=src, group=group)

    scatter_mod.scatter_v = spy
    try:
        src = world - 1
        st = scatter_tensor(x_full if rank == src else None, src, mesh, sharding_shapes={0: [(s, 3) for s in sizes]},
                            requires_grad=True)
    finally:
        scatter_mod.scatter_v = real
    off = _offsets(sizes)[rank]
    _close(st.to_local().detach(), x_full[off:off + sizes[rank]], "scatter_tensor rows")
    assert st.is_leaf and st.requires_grad and st.shard_sizes() == sizes
    assert seen == ([tuple(x_full.shape)] if rank == src else [(0, 3)]), f"rank {rank} scatter_v input {seen}"
    (st * st).sum().backward()
    _close(st.grad.to_local(), 2 * x_full[off:off + sizes[rank]], "scatter_tensor leaf grad")


def _bad_input_checks(mesh, rank, world):
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor

    dtype = torch.float32 if rank == world - 1 else torch.float64
    _expect(ValueError, lambda: ShardTensor.from_local(torch.zeros(2, 3, dtype=dtype), mesh, (Shard(0),)), "float32",
            "float64")
    feat = 4 if rank == 0 else 3
    _expect(ValueError, lambda: ShardTensor.from_local(torch.zeros(rank, feat), mesh, (Shard(0),)), "disagree")
    # the group is still in step afterwards
    st = ShardTensor.from_local(torch.full((rank + 1, 2), float(rank)), mesh, (Shard(0),))
    assert st.shape[0] == world * (world + 1) // 2


def _registry_checks(x_full, mesh, rank, sizes):
    """register_named_function_handler (feature slicing) and register_dispatch_handler."""
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor, _registry

    off = _offsets(sizes)[rank]
    st = ShardTensor.from_local(x_full[off:off + sizes[rank]].clone(), mesh, (Shard(0),))

    def feature_slice(func, types, args, kwargs):
        x, key = args
        if not (isinstance(key, tuple) and key[0] == slice(None)):
            raise NotImplementedError("rows")
        return ShardTensor.from_local(x.to_local()[key], x.device_mesh, x.placements, sharding_shapes=x.shard_sizes())

    ShardTensor.register_named_function_handler("torch.Tensor.__getitem__", feature_slice)
    try:
        _close(st[:, 1:].full_tensor(), x_full[:, 1:], "named handler")
    finally:
        _registry.NAMED_FUNCTION_HANDLERS.pop("torch.Tensor.__getitem__")
    calls = []

    def detach_handler(op, types, args, kwargs):
        calls.append(op)
        x = args[0]
        return ShardTensor.from_local(x._local_tensor.detach(), x.device_mesh, x.placements,
                                      sharding_shapes=x.shard_sizes())

    ShardTensor.register_dispatch_handler(torch.ops.aten.detach.default, detach_handler)
    try:
        d = st.detach()
    finally:
        _registry.DISPATCH_HANDLERS.pop(torch.ops.aten.detach.default)
    assert calls == [torch.ops.aten.detach.default] and isinstance(d, ShardTensor)
    _close(d.full_tensor(), x_full, "dispatch handler")


def _rank_1d(rank, world, data_dir):
    import meshshard as ms
    from meshshard.distributed import Shard, init_device_mesh

    torch.set_default_dtype(torch.float64)
    sizes = SIZES[world]
    x_full = _data(data_dir, sum(sizes))
    mesh = init_device_mesh("cpu", (world,))
    _redistribute_checks(x_full, sizes, mesh, rank, world)
    _ops_check(x_full, sizes, mesh, (Shard(0),), rank, seed=3)
    _dot_handler_check(x_full, mesh, rank, world, sizes)
    _registry_checks(x_full, mesh, rank, sizes)
    _scatter_checks(x_full, mesh, rank, world, sizes)
    if world > 1:
        _bad_input_checks(mesh, rank, world)
    return True


def _rank_2d(rank, world, data_dir):
    """2 x 2 mesh: Replicate on "dp", Shard(0) on "domain" (uneven domain shards 5 and 2)."""
    import meshshard as ms
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor, scatter_tensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
    sizes = [5, 2]
    x_full = _data(data_dir, sum(sizes))
    coord = mesh.get_local_rank(1)
    off = _offsets(sizes)[coord]
    placements = (Replicate(), Shard(0))
    st = ShardTensor.from_local(x_full[off:off + sizes[coord]].clone(), mesh, placements)
    assert st.shard_sizes() == sizes and st.offsets(1) == off and st.offsets(0) == 0
    _close(st.full_tensor(), x_full, "2-D full_tensor")
    rep = st.redistribute(placements=(Replicate(), Replicate()))
    _close(rep.to_local(), x_full, "2-D Shard->Replicate")
    rb = st.redistribute(placements=placements, sharding_shapes={1: [0, 7]})
    _close(rb.to_local(), x_full[:0] if coord == 0 else x_full, "2-D rebalance")
    _ops_check(x_full, sizes, mesh, placements, coord, seed=5)
    sc = scatter_tensor(x_full if rank == 0 else None, 0, mesh, placements, sharding_shapes={1: sizes})
    _close(sc.to_local(), x_full[off:off + sizes[coord]], "2-D scatter_tensor")
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_shard_tensor(world, data_dir):
    assert run_distributed(_rank_1d, world, args=(str(data_dir),), timeout=TIMEOUT) == [True] * world


@pytest.mark.timeout(TIMEOUT + 30)
def test_shard_tensor_2d_mesh(data_dir):
    assert run_distributed(_rank_2d, 4, args=(str(data_dir),), timeout=TIMEOUT) == [True] * 4
