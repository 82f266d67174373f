"""A check every op family runs at 4 ranks: the op on a 2 x 2 ``("dp", "domain")`` DeviceMesh,
Replicate on dp and an uneven Shard on domain, equals the op on the whole tensors in one process
(values and the gradients of every input)."""
from __future__ import annotations

from typing import Callable, Sequence

import torch


def check_on_dp_domain_mesh(name: str, op: Callable, fulls: Sequence[torch.Tensor], sizes: Sequence[int], dim: int = 0,
                            seed: int = 0) -> None:
    """Run ``op(*inputs)`` on ShardTensors laid out ``(Replicate(), Shard(dim))`` with domain shard
    sizes ``sizes`` (two entries) and compare with ``op(*fulls)`` (float64: 1e-10, else 1e-5).

    Args:
        name: the case, for messages.
        op: the operation under test, on tensors shaped like ``fulls``.
        fulls: the whole input tensors (same size along ``dim``; float inputs get gradients).
        sizes: the two domain ranks' rows along ``dim``.
        dim: the sharded dim.
        seed: seed of the random projection used for the backward pass.
    """
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
    coord = mesh.get_local_rank(1)
    off = sum(sizes[:coord])
    locals_ = [f.narrow(dim, off, sizes[coord]).clone().requires_grad_(f.is_floating_point()) for f in fulls]
    sts = [ShardTensor.from_local(t, mesh, (Replicate(), Shard(dim)), sharding_shapes={1: list(sizes)}) for t in locals_]
    refs = [f.clone().requires_grad_(f.is_floating_point()) for f in fulls]
    out, ref = op(*sts), op(*refs)
    full = out.full_tensor() if isinstance(out, ShardTensor) else out
    tol = dict(rtol=1e-10, atol=1e-10) if ref.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    assert full.shape == ref.shape, f"{name} on the dp x domain mesh: shape {tuple(full.shape)} vs {tuple(ref.shape)}"
    assert torch.allclose(full, ref, **tol), f"{name} on the dp x domain mesh: values differ by {(full - ref).abs().max()}"
    if not ref.requires_grad:
        return
    proj = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=ref.dtype)
    (full * proj).sum().backward()
    (ref * proj).sum().backward()
    for i, (t, r) in enumerate(zip(locals_, refs)):
        if r.grad is None:
            continue
        want = r.grad.narrow(dim, off, sizes[coord])
        assert t.grad is not None, f"{name} on the dp x domain mesh: input {i} got no gradient"
        assert torch.allclose(t.grad, want, **tol), \
            f"{name} on the dp x domain mesh: input {i} gradient differs by {(t.grad - want).abs().max()}"


def check_split_in_two_dims(name: str, op: Callable, full: torch.Tensor, params: Sequence[torch.Tensor] = (),
                            mesh_shape=(2, 2), sizes=((3, 6), (5, 1)), dims=(2, 3), seed: int = 0) -> None:
    """Run ``op(x, *params)`` on a ShardTensor split along two tensor dims by the two dims of a
    ``mesh_shape`` DeviceMesh (``(Shard(dims[0]), Shard(dims[1]))``, shard sizes ``sizes[0]`` along
    ``dims[0]`` and ``sizes[1]`` along ``dims[1]``) and compare with ``op`` on the whole tensor in one
    process: the value, the input gradient and every param's gradient (plain params: per-rank partial
    sums, summed over the whole mesh here). float64: 1e-10, else 1e-5.

    Args:
        name: the case, for messages.
        op: the operation under test.
        full: the whole input.
        params: plain weights passed after the input (float ones get gradients).
        mesh_shape: the 2-D mesh shape; its product is the world size.
        sizes: every mesh coordinate's rows along ``dims[0]`` and ``dims[1]``.
        dims: the two sharded tensor dims.
        seed: seed of the random projection used for the backward pass.
    """
    from meshshard.distributed import Shard, all_reduce, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", tuple(mesh_shape))
    c0, c1 = mesh.get_local_rank(0), mesh.get_local_rank(1)
    o0, o1 = sum(sizes[0][:c0]), sum(sizes[1][:c1])
    n0, n1 = sizes[0][c0], sizes[1][c1]
    grad = full.is_floating_point()
    xl = full.narrow(dims[0], o0, n0).narrow(dims[1], o1, n1).clone().requires_grad_(grad)
    x = ShardTensor.from_local(xl, mesh, (Shard(dims[0]), Shard(dims[1])),
                               sharding_shapes={0: list(sizes[0]), 1: list(sizes[1])})
    ps = [p.clone().requires_grad_(p.is_floating_point()) for p in params]
    xr = full.clone().requires_grad_(grad)
    prs = [p.clone().requires_grad_(p.is_floating_point()) for p in params]
    out, ref = op(x, *ps), op(xr, *prs)
    got = out.full_tensor() if isinstance(out, ShardTensor) else out
    where = f"{name} on a {tuple(mesh_shape)} mesh, sizes {sizes}"
    tol = dict(rtol=1e-10, atol=1e-10) if full.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
    assert got.shape == ref.shape, f"{where}: shape {tuple(got.shape)} vs {tuple(ref.shape)}"
    if not ref.is_floating_point():
        assert torch.equal(got, ref), f"{where}: values differ"
        return
    assert torch.allclose(got, ref, equal_nan=True, **tol), f"{where}: values differ by {(got - ref).abs().max()}"
    if not ref.requires_grad:
        return
    proj = torch.randn(ref.shape, generator=torch.Generator().manual_seed(seed), dtype=ref.dtype)
    (got * proj).sum().backward()
    (ref * proj).sum().backward()
    want = xr.grad.narrow(dims[0], o0, n0).narrow(dims[1], o1, n1)
    assert xl.grad is not None, f"{where}: the input got no gradient"
    assert torch.allclose(xl.grad, want, **tol), f"{where}: input gradient differs by {(xl.grad - want).abs().max()}"
    for i, (p, pr) in enumerate(zip(ps, prs)):
        if pr.grad is None:
            continue
        assert p.grad is not None, f"{where}: param {i} got no gradient"
        g = p.grad.clone()
        all_reduce(g)
        assert torch.allclose(g, pr.grad, **tol), f"{where}: param {i} gradient differs by {(g - pr.grad).abs().max()}"


# Layouts of a 9 x 6 pair of dims split by a 2-D mesh, per world size: (mesh shape, rows of every
# coordinate along the first dim, along the second); uneven, with empty and one-row shards.
SPLIT_9_BY_6 = {1: [((1, 1), (9,), (6,))],
                3: [((1, 3), (9,), (2, 0, 4)), ((3, 1), (2, 1, 6), (6,))],
                4: [((2, 2), (3, 6), (5, 1)), ((2, 2), (9, 0), (4, 2)), ((2, 2), (1, 8), (0, 6))]}
