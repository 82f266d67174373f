"""``torch.cat`` / ``torch.stack`` on 1-4 gloo ranks, uneven shards with a zero-row rank, float64
1e-10 against one process (values, layout and the gradients of every input): ``stack`` along every
dim of tensors sharded along dim 0 and dim 1 (the Shard dim moves up when stacking before it), with
replicated ShardTensors and plain tensors among the inputs, of Partial tensors (staying Partial);
an image split in height and width on a 2 x 2 mesh at 4 ranks; clear errors for what is not
supported."""
import warnings

import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}
TOL = dict(rtol=1e-10, atol=1e-10)


def _close(a, b, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL), f"{what}: max diff {(a - b).abs().max().item()}"


def _stack_case(rank, mesh, placements, sizes_by_mesh_dim, fulls, kinds, dim, what):
    """``torch.stack`` of inputs given as whole tensors; ``kinds[i]`` is "shard" (laid out by
    ``placements``), "replicate" (a replicated ShardTensor) or "plain"."""
    from meshshard.distributed import Replicate, Shard
    from meshshard.tensor import ShardTensor

    def rows(t):
        for m, p in enumerate(placements):
            if isinstance(p, Shard):
                sizes = sizes_by_mesh_dim[m]
                coord = mesh.get_local_rank(m)
                t = t.narrow(p.dim, sum(sizes[:coord]), sizes[coord])
        return t

    refs = [f.clone().requires_grad_() for f in fulls]
    locals_, ins = [], []
    for f, kind in zip(fulls, kinds):
        local = (rows(f) if kind == "shard" else f).clone().requires_grad_()
        locals_.append(local)
        if kind == "shard":
            ins.append(ShardTensor.from_local(local, mesh, placements, sharding_shapes=sizes_by_mesh_dim))
        elif kind == "replicate":
            ins.append(ShardTensor.from_local(local, mesh, (Replicate(),) * mesh.ndim))
        else:
            ins.append(local)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = torch.stack(ins, dim)
    ref = torch.stack(refs, dim)
    nd = ref.dim()
    want = tuple(Shard(p.dim + 1) if isinstance(p, Shard) and p.dim >= dim % nd else p for p in placements)
    assert tuple(out.placements) == want, f"{what}: placements {out.placements} vs {want}"
    full = out.full_tensor()
    _close(full, ref.detach(), f"{what} value")
    proj = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2), dtype=ref.dtype)
    (full * proj).sum().backward()
    (ref * proj).sum().backward()
    for i, (local, r, kind) in enumerate(zip(locals_, refs, kinds)):
        if kind == "shard":
            _close(local.grad, rows(r.grad), f"{what} gradient of input {i}")
        elif kind == "replicate":  # a replicated ShardTensor: the whole gradient on every rank
            _close(local.grad, r.grad, f"{what} gradient of input {i}")


def _check(rank, world):
    from meshshard.distributed import Partial, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    g = torch.Generator().manual_seed(0)
    a, b, c = (torch.randn(5, 3, 2, generator=g, dtype=torch.float64) for _ in range(3))
    at, bt = a.transpose(0, 1).contiguous(), b.transpose(0, 1).contiguous()  # [3, 5, 2]
    for dim in (0, 1, 2, 3, -1, -4):
        _stack_case(rank, mesh, (Shard(0),), {0: sizes}, [a, b, c], ["shard"] * 3, dim, f"stack dim {dim}")
        _stack_case(rank, mesh, (Shard(1),), {0: sizes}, [at, bt], ["shard"] * 2, dim, f"stack Shard(1) dim {dim}")
    _stack_case(rank, mesh, (Shard(0),), {0: sizes}, [a, b, c], ["shard", "replicate", "plain"], 1, "mixed inputs")
    _stack_case(rank, mesh, (Shard(0),), {0: sizes}, [a, b], ["replicate", "shard"], 0, "replicated first")

    # Partial tensors of one layout stay Partial
    parts = [ShardTensor.from_local(torch.full((2,), float(rank + k), dtype=torch.float64), mesh, (Partial(),))
             for k in (1, 2)]
    st = torch.stack(parts, 1)
    assert st.placements == (Partial(),)
    total = [float(sum(r + k for r in range(world))) for k in (1, 2)]
    _close(st.full_tensor(), torch.tensor([total, total], dtype=torch.float64), "stack of Partial")

    xs = ShardTensor.from_local(a.narrow(0, sum(sizes[:rank]), sizes[rank]), mesh, (Shard(0),),
                                sharding_shapes={0: sizes})
    _expect(NotImplementedError, lambda: torch.stack([parts[0], xs[:, 0, 0]]), "Partial")
    _expect(RuntimeError, lambda: torch.stack([xs, xs[:, :2]]), "equal global shape")
    _expect(IndexError, lambda: torch.stack([xs, xs], 4), "out of range")
    _expect(NotImplementedError, lambda: torch.cat([xs, xs], 0), "sharded dim")

    if world == 4:  # an image [B, C, H, W] split in height and width on a 2 x 2 mesh, uneven on both
        mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("h", "w"))
        img = [torch.randn(2, 3, 5, 4, generator=g, dtype=torch.float64) for _ in range(2)]
        for dim in (0, 2, 3, -1):
            _stack_case(rank, mesh2, (Shard(2), Shard(3)), {0: [2, 3], 1: [3, 1]}, img, ["shard", "shard"], dim,
                        f"2 x 2 mesh stack dim {dim}")
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_cat_and_stack(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
