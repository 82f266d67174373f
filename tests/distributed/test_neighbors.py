"""fetch_ranges at 3 gloo ranks (one holds no row): overlapping, reordered and multi-owner
ranges give the right rows, the gradient of a row fetched by several ranks is the sum of theirs,
and a range outside the tensor raises on every rank."""
import pytest
import torch

from meshshard.testing import run_distributed

SIZES = [4, 0, 3]
RANGES = [[(2, 7)], [(0, 7), (3, 4)], [(6, 7), (0, 2), (3, 5)]]  # rank 1 owns nothing, fetches all


def _check(rank, world):
    from meshshard.distributed.neighbors import fetch_ranges

    full = torch.arange(7 * 2, dtype=torch.float64).reshape(1, 7, 2)
    off = sum(SIZES[:rank])
    local = full[:, off:off + SIZES[rank]].clone().requires_grad_()
    got = fetch_ranges(local, SIZES, RANGES, dim=1)
    want = torch.cat([full[:, a:b] for a, b in RANGES[rank]], 1)
    assert torch.equal(got, want), (rank, got, want)
    (got * (rank + 1)).sum().backward()
    uses = torch.zeros(7, dtype=torch.float64)
    for q, rs in enumerate(RANGES):
        for a, b in rs:
            uses[a:b] += q + 1
    assert torch.equal(local.grad, uses[off:off + SIZES[rank]].reshape(1, -1, 1).expand_as(local)), local.grad
    try:
        fetch_ranges(local.detach(), SIZES, [[(0, 8)]] * 3, dim=1)
    except ValueError as e:
        assert "outside [0, 7]" in str(e)
    else:
        raise AssertionError("a range past the end must raise")
    return True


@pytest.mark.timeout(120)
def test_fetch_ranges_rows_and_gradients():
    assert run_distributed(_check, 3, timeout=100) == [True] * 3


def _second_order(rank, world):
    """The backward is itself differentiable (the two maps are each other's adjoint): the gradient of
    a function of the first gradient equals the one computed on the whole tensor in one process."""
    from meshshard.distributed.neighbors import fetch_ranges

    g = torch.Generator().manual_seed(3)
    full = torch.randn(1, 7, 2, dtype=torch.float64, generator=g)
    weights = [torch.randn(1, sum(b - a for a, b in rs), 2, dtype=torch.float64, generator=g) for rs in RANGES]
    # one process: f = sum_q sum(w_q * rows_q(x)^2); grad f = sum_q scatter(2 w_q rows_q(x)); then h = sum(grad f ^ 2)
    x = full.clone().requires_grad_()
    f = sum((w * torch.cat([x[:, a:b] for a, b in rs], 1) ** 2).sum() for w, rs in zip(weights, RANGES))
    (gx,) = torch.autograd.grad(f, x, create_graph=True)
    (want,) = torch.autograd.grad((gx ** 2).sum(), x)
    off = sum(SIZES[:rank])
    local = full[:, off:off + SIZES[rank]].clone().requires_grad_()
    f_local = (weights[rank] * fetch_ranges(local, SIZES, RANGES, dim=1) ** 2).sum()
    (gl,) = torch.autograd.grad(f_local, local, create_graph=True)  # this rank's rows of grad f (summed by backward)
    (got,) = torch.autograd.grad((gl ** 2).sum(), local)
    assert torch.allclose(got, want[:, off:off + SIZES[rank]], rtol=0, atol=1e-12), (rank, got, want)
    return True


@pytest.mark.timeout(120)
def test_fetch_ranges_second_derivatives():
    assert run_distributed(_second_order, 3, timeout=100) == [True] * 3
