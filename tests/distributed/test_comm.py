import pytest
import torch

import meshshard.distributed as msd
from meshshard.testing import DistributedTimeoutError, run_distributed


def _primitives(rank, world_size):
    sizes = msd.all_gather_sizes([rank, 2 * rank])
    # rank r sends (j + 1) copies of r to rank j: uneven both ways, rank 0 receives 1 row each
    send = torch.cat([torch.full((j + 1,), float(rank)) for j in range(world_size)])
    recv = msd.all_to_all_single(send, [rank + 1] * world_size, [j + 1 for j in range(world_size)])
    total = msd.all_reduce(torch.tensor([float(rank)]))
    b = msd.broadcast(torch.tensor([rank * 10]), src=world_size - 1)
    mismatch = None
    try:
        msd.check_same_across_ranks([7, rank == 0], "probe", names=["a", "first"])
    except msd.CollectiveMismatchError as exc:
        mismatch = str(exc)
    return sizes, recv, total, b, mismatch, msd.get_backend(), msd.comm_device().type


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_primitives(world_size):
    results = run_distributed(_primitives, world_size, timeout=60)
    for rank, (sizes, recv, total, b, mismatch, backend, dev) in enumerate(results):
        assert sizes.tolist() == [[r, 2 * r] for r in range(world_size)]
        expected = torch.cat([torch.full((rank + 1,), float(j)) for j in range(world_size)])
        assert torch.equal(recv, expected)
        assert total.item() == sum(range(world_size))
        assert b.item() == (world_size - 1) * 10
        assert backend == "gloo" and dev == "cpu"
        if world_size > 1:
            assert mismatch is not None and "probe" in mismatch and "rank 0: a=7, first=1" in mismatch
        else:
            assert mismatch is None


def test_single_process_without_group():
    assert not msd.is_initialized()
    assert msd.get_rank() == 0 and msd.get_world_size() == 1
    assert msd.init_distributed() == (0, 1)  # no torchrun env: a no-op
    x = torch.arange(5.0)
    assert torch.equal(msd.all_to_all_single(x, [5], [5]), x)
    assert msd.all_gather_sizes([3, 4]).tolist() == [[3, 4]]


def _raise_on_one(rank, world_size):
    if rank == 1:
        raise KeyError("rank one failed")
    msd.barrier()


def _hang(rank, world_size):
    if rank == 0:
        msd.barrier()  # rank 1 never joins
    import time

    time.sleep(60)


def test_run_distributed_reraises_and_times_out():
    with pytest.raises(KeyError, match="rank one failed"):
        run_distributed(_raise_on_one, 2, timeout=60)
    with pytest.raises(DistributedTimeoutError, match="did not finish"):
        run_distributed(_hang, 2, timeout=6)
