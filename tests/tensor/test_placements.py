"""Placement semantics on 1-4 gloo ranks: gradients reaching Partial tensors come back Replicate
(their full_tensor() is the true gradient, not W times it), reductions of Partial tensors stay
Partial, to_local / full_tensor honour grad_placements, and the promotion rule for plain tensors
(Replicate, with a PromotionWarning once per op); float64 at 1e-10 against one process."""
import warnings

import pytest
import torch

from meshshard.testing import run_distributed

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 120
TOL = dict(rtol=1e-10, atol=1e-10)


def _close(a, b, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, **TOL), f"{what}: max diff {(a - b).abs().max().item()}"


def _addends(world):
    """Every rank's addend of a Partial tensor [3, 4] (rank r's is addends[r])."""
    g = torch.Generator().manual_seed(11)
    return [torch.randn(3, 4, generator=g, dtype=torch.float64) for _ in range(world)]


def _partial_checks(rank, world, mesh):
    from meshshard.distributed import Partial, Replicate
    from meshshard.tensor import ShardTensor

    addends = _addends(world)
    total = sum(addends)
    w = torch.linspace(-1.0, 2.0, 12, dtype=torch.float64).reshape(3, 4)

    # leaf Partial ShardTensor: the loss sees the sum of the addends
    x = ShardTensor.from_local(addends[rank].clone(), mesh, (Partial(),)).detach().requires_grad_()
    _close(x.full_tensor(), total, "Partial full_tensor")
    loss = (x.full_tensor() ** 2 * w).sum()
    loss.backward()
    true_grad = 2 * total * w
    assert x.grad.placements == (Replicate(),), x.grad.placements
    _close(x.grad.to_local(), true_grad, "Partial leaf grad (local)")
    _close(x.grad.full_tensor(), true_grad, "Partial leaf grad (full_tensor)")

    # the addend itself (non-leaf path through from_local): its gradient is the whole gradient
    a = addends[rank].clone().requires_grad_()
    y = ShardTensor.from_local(a, mesh, (Partial(),))
    (y.redistribute(placements=(Replicate(),)).to_local() * w).sum().backward()
    _close(a.grad, w, "addend grad")

    # sum / mean of a Partial tensor: reduced locally, still Partial, resolves to the true value
    x2 = ShardTensor.from_local(addends[rank].clone(), mesh, (Partial(),)).detach().requires_grad_()
    s = x2.sum()
    assert s.placements == (Partial(),), s.placements
    _close(s.full_tensor(), total.sum(), "sum of Partial")
    m = torch.mean(x2, dim=1)
    assert m.placements == (Partial(),), m.placements
    _close(m.full_tensor(), total.mean(1), "mean(dim=1) of Partial")
    s.backward()  # backward straight from a Partial scalar: d(sum)/dx is ones, once
    assert x2.grad.placements == (Replicate(),)
    _close(x2.grad.full_tensor(), torch.ones(3, 4, dtype=torch.float64), "grad of Partial sum")

    # linear element-wise ops keep Partial (no all-reduce); a non-linear one refuses it
    x3 = ShardTensor.from_local(addends[rank].clone(), mesh, (Partial(),)).detach().requires_grad_()
    lin = -((x3 + x3 * 2.5) / 4.0 - x3)
    assert lin.placements == (Partial(),), lin.placements
    _close(lin.full_tensor(), -((total + total * 2.5) / 4.0 - total), "linear ops on Partial")
    (lin.full_tensor() * w).sum().backward()
    _close(x3.grad.full_tensor(), -(3.5 / 4.0 - 1.0) * w, "gradient through linear ops on Partial")
    try:
        torch.exp(x3)
    except NotImplementedError as e:
        assert "Partial" in str(e)
    else:
        raise AssertionError("exp of a Partial tensor must raise")
    try:
        x3 + 1.0  # adding a constant to every addend would add it W times
    except NotImplementedError as e:
        assert "Partial" in str(e)
    else:
        raise AssertionError("Partial + scalar must raise")

    # grad_placements: a replicated tensor whose local copy feeds per-rank sums gets the summed grad
    r = ShardTensor.from_local(total.clone(), mesh, (Replicate(),)).detach().requires_grad_()
    (r.to_local(grad_placements=(Partial(),)) * w * (rank + 1)).sum().backward()
    _close(r.grad.to_local(), w * sum(range(1, world + 1)), "to_local(grad_placements=Partial)")
    r.grad = None
    (r.full_tensor(grad_placements=(Partial(),)) * w * (rank + 1)).sum().backward()
    _close(r.grad.to_local(), w * sum(range(1, world + 1)), "full_tensor(grad_placements=Partial)")


def _promotion_checks(rank, world, mesh):
    from meshshard.distributed import Shard
    from meshshard.tensor import PromotionWarning, ShardTensor

    sizes = {1: [5], 2: [0, 5], 3: [2, 0, 3], 4: [1, 2, 0, 2]}[world]
    full = torch.arange(20, dtype=torch.float64).reshape(5, 4)
    off = sum(sizes[:rank])
    x = ShardTensor.from_local(full[off:off + sizes[rank]].clone(), mesh, (Shard(0),))
    plain = torch.linspace(0.0, 1.0, 20, dtype=torch.float64).reshape(5, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _close((x * plain).full_tensor(), full * plain, "plain tensor spanning the sharded dim")
        _close(torch.cat([x, plain], dim=1).full_tensor(), torch.cat([full, plain], 1), "cat with a plain tensor")
        quiet = len(caught)
        _close((x + torch.tensor(2.0, dtype=torch.float64)).full_tensor(), full + 2, "0-d plain tensor")
        _close((x - torch.nn.Parameter(plain[0])).full_tensor(), full - plain[0], "nn.Parameter")
    promoted = [w for w in caught if issubclass(w.category, PromotionWarning)]
    assert quiet == 2 and len(promoted) == 2 and len(caught) == 2, [str(w.message) for w in caught]
    assert "promoted to Replicate" in str(promoted[0].message)


def _rank_main(rank, world):
    from meshshard.distributed import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    _partial_checks(rank, world, mesh)
    _promotion_checks(rank, world, mesh)
    return True


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_placements(world):
    assert run_distributed(_rank_main, world, timeout=TIMEOUT) == [True] * world
