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
