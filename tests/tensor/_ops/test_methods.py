"""The sweep of the tensor methods users reach for on sharded data (``torch.stack``, ``new_*``,
``*_like``, ``clone``, casts, ``masked_fill``, ``where``, ``clamp``, ``expand``, ``repeat``,
``unsqueeze`` / ``squeeze``, ``chunk`` / ``split``, ``detach``, ``requires_grad_`` ...): every entry
either equals the op on the whole tensor in one process (values, the layout it keeps, and the
gradient of the input) or is refused by name with the way out. 1-4 gloo ranks, uneven shards with a
zero-row rank, float64 1e-10 (float32 casts 1e-5); the whole sweep runs with the promotion mode
"raise", so none of these methods promotes a plain tensor behind the user's back. At 4 ranks the
exact entries run again on a 2 x 2 (dp x domain) mesh."""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 300
SIZES = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}
SHAPE = (3, 4)  # the feature dims after the sharded dim 0
TOL = {torch.float64: dict(rtol=1e-10, atol=1e-10), torch.float32: dict(rtol=1e-5, atol=1e-5),
       torch.float16: dict(rtol=1e-3, atol=1e-3), torch.int64: dict(rtol=0, atol=0),
       torch.int32: dict(rtol=0, atol=0), torch.bool: dict(rtol=0, atol=0)}

S0, S1, S2, R = "Shard(0)", "Shard(1)", "Shard(2)", "Replicate"


def _f32():
    return torch.zeros(2, dtype=torch.float32)


# (name, op on a ShardTensor or the whole tensor, placement of every output ("values": compare
# values and gradients; "shape": only shape, dtype and layout, for uninitialised / random tensors))
EXACT = [
    ("torch.stack dim 0", lambda t: torch.stack([t, t * 2], 0), S1, "values"),
    ("torch.stack dim 1", lambda t: torch.stack([t, t * 2, t - 1], 1), S0, "values"),
    ("torch.stack dim -1", lambda t: torch.stack([t, t.sin()], -1), S0, "values"),
    ("new_zeros (global shape: layout kept)", lambda t: t.new_zeros(t.shape), S0, "values"),
    ("new_zeros (other shape: Replicate)", lambda t: t.new_zeros(2, 3), R, "values"),
    ("new_ones", lambda t: t.new_ones((4,)), R, "values"),
    ("new_full", lambda t: t.new_full(t.shape, 2.5), S0, "values"),
    ("new_full other shape", lambda t: t.new_full((2, 2), -1.0, dtype=torch.float32), R, "values"),
    ("new_empty", lambda t: t.new_empty(t.shape), S0, "shape"),
    ("new_tensor", lambda t: t.new_tensor([1.0, 2.0, 3.0]), R, "values"),
    ("zeros_like", lambda t: torch.zeros_like(t), S0, "values"),
    ("ones_like", lambda t: torch.ones_like(t, dtype=torch.float32), S0, "values"),
    ("full_like", lambda t: torch.full_like(t, 7.0), S0, "values"),
    ("empty_like", lambda t: torch.empty_like(t), S0, "shape"),
    ("rand_like", lambda t: torch.rand_like(t), S0, "shape"),
    ("randn_like", lambda t: torch.randn_like(t), S0, "shape"),
    ("clone", lambda t: t.clone() * 3, S0, "values"),
    ("torch.clone", lambda t: torch.clone(t), S0, "values"),
    ("type_as (plain float32 tensor)", lambda t: t.type_as(_f32()), S0, "values"),
    ("to(dtype)", lambda t: t.to(torch.float32), S0, "values"),
    ("to(plain tensor)", lambda t: t.to(_f32()), S0, "values"),
    ("float", lambda t: t.float(), S0, "values"),
    ("double", lambda t: t.float().double(), S0, "values"),
    ("half", lambda t: t.half(), S0, "values"),
    ("long (neighbour ids as point codes cast them)", lambda t: (t * 10).long(), S0, "values"),
    ("int", lambda t: (t * 10).int(), S0, "values"),
    ("bool", lambda t: (t > 0).int().bool(), S0, "values"),
    ("masked_fill (sharded mask)", lambda t: t.masked_fill(t > 0.2, -1.0), S0, "values"),
    ("torch.masked_fill (0-d value)", lambda t: torch.masked_fill(t, t < 0, torch.tensor(0.5, dtype=t.dtype)),
     S0, "values"),
    ("torch.where", lambda t: torch.where(t > 0, t, 0.0), S0, "values"),
    ("Tensor.where", lambda t: (t * 2).where(t < 0.3, t.cos()), S0, "values"),
    ("clamp", lambda t: t.clamp(min=-0.5, max=0.4), S0, "values"),
    ("clamp_min with a tensor", lambda t: torch.clamp(t, min=t.cos() - 1), S0, "values"),
    ("contiguous", lambda t: t.transpose(1, 2).contiguous(), S0, "values"),
    ("expand", lambda t: t[:, :, None].expand(-1, -1, 2, -1), S0, "values"),
    ("expand_as", lambda t: t[:, :1].expand_as(t), S0, "values"),
    ("expand (new leading dim)", lambda t: t.expand(2, *t.shape), S1, "values"),
    ("repeat (unsharded dims)", lambda t: t.repeat(1, 2, 3), S0, "values"),
    ("repeat (new leading dims)", lambda t: t.repeat(2, 1, 1, 2), S1, "values"),
    ("torch.tile", lambda t: torch.tile(t, (2, 1)), S0, "values"),
    ("unsqueeze", lambda t: t.unsqueeze(1), S0, "values"),
    ("unsqueeze before the sharded dim", lambda t: t.unsqueeze(0), S1, "values"),
    ("squeeze", lambda t: t[:, :1].squeeze(1), S0, "values"),
    ("chunk (unsharded dim)", lambda t: t.chunk(2, dim=1), S0, "values"),
    ("split (unsharded dim)", lambda t: t.split([1, 3], dim=2), S0, "values"),
    ("torch.split", lambda t: torch.split(t, 2, dim=-1), S0, "values"),
    ("detach", lambda t: t.detach() * 2, S0, "values"),
    ("requires_grad_", lambda t: t.detach().requires_grad_() * 1.5, S0, "values"),
    ("in-place masked_fill_", lambda t: (t * 1).masked_fill_(t > 0, 0.0), S0, "values"),
    ("in-place clamp_", lambda t: (t * 1).clamp_(min=0.0), S0, "values"),
    ("in-place +=", lambda t: _iadd(t * 1, t.sin()), S0, "values"),
    ("F.relu(inplace=True)", lambda t: torch.nn.functional.relu(t * 1, inplace=True), S0, "values"),
]


def _iadd(a, b):
    a += b
    return a

# (name, op on a ShardTensor, exception, words its message must contain)
REFUSED = [
    ("repeat of the sharded dim", lambda t: t.repeat(2, 1, 1), NotImplementedError, ["repeat", "sharded dim"]),
    ("tile of the sharded dim", lambda t: torch.tile(t, (2, 1, 1)), NotImplementedError, ["tile", "sharded dim"]),
    ("where(condition)", lambda t: torch.where(t > 0), NotImplementedError, ["torch.where", "full_tensor"]),
    ("new_tensor of a ShardTensor", lambda t: t.new_tensor(t), NotImplementedError, ["new_tensor", "clone"]),
    ("new_empty_strided", lambda t: t.new_empty_strided((2,), (1,)), NotImplementedError,
     ["new_empty_strided", "register"]),
    ("stack(out=)", lambda t: torch.stack([t, t], out=t.new_empty(2, 2)), NotImplementedError, ["stack", "out="]),
    ("expand of the sharded dim", lambda t: t[:1].expand(4, -1, -1), NotImplementedError, ["expand", "sharded dim"]),
    ("a plain tensor in masked_fill under 'raise'",
     lambda t: t.masked_fill(torch.ones(SHAPE[1], dtype=torch.bool), 0.0), TypeError, ["masked_fill", "'raise'"]),
]


def _placement(name):
    from meshshard.distributed import Replicate, Shard

    return Replicate() if name == R else Shard(int(name[6]))


def _outputs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _run_exact(name, op, want, kind, x_full, make, rows):
    """``make(local)`` builds the ShardTensor from this rank's rows; ``rows(t)`` takes this rank's rows."""
    from meshshard.tensor import ShardTensor

    ref_in = x_full.clone().requires_grad_()
    local = rows(x_full).clone().requires_grad_()
    ref_out, out = _outputs(op(ref_in)), _outputs(op(make(local)))
    assert len(out) == len(ref_out), f"{name}: {len(out)} outputs vs {len(ref_out)}"
    loss, ref_loss = 0.0, 0.0
    for i, (o, r) in enumerate(zip(out, ref_out)):
        assert isinstance(o, ShardTensor), f"{name}: output {i} is a {type(o).__name__}"
        assert o.dtype == r.dtype, f"{name}: dtype {o.dtype} vs {r.dtype}"
        assert want is None or want in o.placements, f"{name}: placements {o.placements}, expected {want}"
        full = o.full_tensor()
        assert full.shape == r.shape, f"{name}: shape {tuple(full.shape)} vs {tuple(r.shape)}"
        if kind == "shape":
            continue
        assert torch.allclose(full.double(), r.double(), **TOL[r.dtype]), \
            f"{name}: output {i} differs by {(full.double() - r.double()).abs().max()}"
        if r.requires_grad:
            proj = torch.randn(r.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
            loss = loss + (full.double() * proj).sum()
            ref_loss = ref_loss + (r.double() * proj).sum()
    if isinstance(ref_loss, torch.Tensor):
        ref_loss.backward()
        loss.backward()
        if ref_in.grad is None:  # the output does not depend on the input (detach, requires_grad_)
            assert local.grad is None, f"{name}: a gradient where one process has none"
            return
        assert local.grad is not None, f"{name}: no gradient"
        assert torch.allclose(local.grad, rows(ref_in.grad), **TOL[torch.float64]), \
            f"{name}: gradient differs by {(local.grad - rows(ref_in.grad)).abs().max()}"


def _check(rank, world):
    from meshshard.distributed import Replicate, Shard, init_device_mesh
    from meshshard.tensor import ShardTensor, promotion

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    off = sum(sizes[:rank])
    g = torch.Generator().manual_seed(1)
    x_full = torch.randn((sum(sizes),) + SHAPE, generator=g, dtype=torch.float64)

    def make(local):
        return ShardTensor.from_local(local, mesh, (Shard(0),), sharding_shapes={0: sizes})

    def rows(t):
        return t.narrow(0, off, sizes[rank])

    with promotion("raise"):
        for name, op, want, kind in EXACT:
            _run_exact(name, op, _placement(want), kind, x_full, make, rows)
        for name, op, exc, words in REFUSED:
            st = make(rows(x_full).clone())
            _expect(exc, lambda: op(st), *words)
        if world == 4:  # (dp x domain) mesh: Replicate on dp, uneven Shard on domain
            mesh2 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "domain"))
            dom_sizes = [2, 3]
            coord = mesh2.get_local_rank(1)
            start = sum(dom_sizes[:coord])

            def make2(local):
                return ShardTensor.from_local(local, mesh2, (Replicate(), Shard(0)), sharding_shapes={1: dom_sizes})

            def rows2(t):
                return t.narrow(0, start, dom_sizes[coord])

            for name, op, want, kind in EXACT:
                _run_exact(f"{name} (dp x domain)", op, None, kind, x_full, make2, rows2)
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_tensor_methods_sweep(world):
    assert run_distributed(_check, world, timeout=TIMEOUT) == [True] * world
