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
