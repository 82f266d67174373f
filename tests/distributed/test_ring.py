"""ring_shift on 3 gloo ranks with uneven blocks (one empty): values for steps 1, -1 and 2, the
gradient travelling back, the byte counter, and the single-process copy."""
import torch

from meshshard.testing import run_distributed

SIZES = [2, 0, 3]


def _block(r):
    return torch.arange(SIZES[r] * 4, dtype=torch.float64).reshape(SIZES[r], 4) + 100 * r


def _check(rank, world):
    from meshshard.distributed.ring import ring_bytes_sent, ring_shift

    ring_bytes_sent(reset=True)
    for step in (1, -1, 2):
        src = (rank - step) % world
        x = _block(rank).requires_grad_()
        y = ring_shift(x, (SIZES[src], 4), step=step)
        assert torch.equal(y, _block(src)), (step, y)
        (y * (rank + 1)).sum().backward()  # the gradient comes from the receiver, rank + step
        assert torch.equal(x.grad, torch.full_like(x, (rank + step) % world + 1)), (step, x.grad)
    # forward sends the own block, backward the gradient of the received one (empty blocks: nothing)
    expected = sum(SIZES[rank] + SIZES[(rank - step) % world] for step in (1, -1, 2)) * 4 * 8
    assert ring_bytes_sent() == expected
    return True


def test_ring_shift():
    assert run_distributed(_check, 3, timeout=120) == [True] * 3


def test_ring_shift_single_process():
    from meshshard.distributed.ring import ring_shift

    x = torch.randn(3, 2, requires_grad=True)
    y = ring_shift(x, (3, 2))
    y.sum().backward()
    assert torch.equal(y, x) and torch.equal(x.grad, torch.ones_like(x))
