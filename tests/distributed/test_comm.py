"""Process-group set-up without spawning (init_distributed's choices) and the test harness itself
(meshshard.testing.run_distributed: results, re-raised exceptions with their traceback, hung ranks
killed at the timeout). The raw collectives run with 1-4 ranks in test_autograd.py, in the same
spawned groups as the differentiable ones (every spawned group costs seconds)."""
import os
import time

import pytest
import torch

import meshshard.distributed as msd
from meshshard.testing import DistributedTimeoutError, run_distributed
from tests._process import alive

_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")


def test_single_process_without_group(monkeypatch):
    for v in _ENV:
        monkeypatch.delenv(v, raising=False)
    assert not msd.is_initialized()
    assert msd.get_rank() == 0 and msd.get_world_size() == 1 and msd.get_backend() is None
    assert msd.init_distributed() == (0, 1)  # no torchrun env: a no-op
    assert msd.init_distributed(backend="gloo", timeout=5.0) == (0, 1)
    assert not msd.is_initialized() and msd.comm_device().type == "cpu"
    x = torch.arange(5.0)
    assert torch.equal(msd.all_to_all_single(x, [5], [5]), x)
    assert msd.all_gather_sizes([3, 4]).tolist() == [[3, 4]]
    assert msd.all_gather_into_tensor(x).shape == (1, 5)
    assert msd.all_gather_object({"a": 1}) == [{"a": 1}]
    assert torch.equal(msd.all_reduce(x.clone()), x) and torch.equal(msd.broadcast(x.clone()), x)
    msd.barrier()
    assert msd.batch_isend_irecv([]) == []


def test_init_distributed_incomplete_env_and_bad_backend(monkeypatch):
    for v in _ENV:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(RuntimeError, match="MASTER_ADDR, MASTER_PORT missing"):
        msd.init_distributed()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "1")
    with pytest.raises(ValueError, match="unknown torch.distributed backend 'mpx'"):
        msd.init_distributed(backend="mpx")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="needs CUDA"):
            msd.init_distributed(backend="nccl")
    with pytest.raises(ValueError, match="needs rank and world_size"):
        msd.init_distributed(init_method="tcp://127.0.0.1:1")
    assert not msd.is_initialized()


def test_backend_choice_and_local_device(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert msd.default_backend() == "gloo" and msd.set_local_device() is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", calls.append)
    monkeypatch.setenv("LOCAL_RANK", "6")
    assert msd.default_backend() == "nccl"
    assert msd.set_local_device() == torch.device("cuda", 2) and calls == [2]


def _raise_on_one(rank, world_size):
    if rank == 1:
        raise KeyError("rank one failed")
    msd.barrier()  # rank 0 waits for a rank that never comes: it must be killed, not awaited
    time.sleep(60)


def _hang(rank, world_size, pid_dir):
    path = os.path.join(pid_dir, str(rank))
    with open(path + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    if rank == 0:
        msd.barrier()  # rank 1 never joins
    time.sleep(120)


@pytest.mark.timeout(180)
def test_run_distributed_reraises_and_times_out(tmp_path):
    # A rank that raises: its exception type and message, chained to the remote traceback, and
    # long before the timeout (the waiting rank is killed).
    t0 = time.monotonic()
    with pytest.raises(KeyError, match="rank one failed") as info:
        run_distributed(_raise_on_one, 2, timeout=90)
    assert time.monotonic() - t0 < 60
    remote = str(info.value.__cause__)
    assert "rank 1 of 2" in remote and "_raise_on_one" in remote and "raise KeyError" in remote
    # Hung ranks: DistributedTimeoutError at the timeout, every rank killed. The error lists every
    # started process, so this holds even when load delays start-up past the timeout (then no rank
    # has written its pid file yet; those that did must be among the listed pids).
    timeout = 10.0
    t0 = time.monotonic()
    with pytest.raises(DistributedTimeoutError, match="did not finish within 10s") as info:
        run_distributed(_hang, 2, args=(str(tmp_path),), timeout=timeout)
    assert time.monotonic() - t0 < timeout + 15
    pids = info.value.pids
    assert len(pids) == 2 and not any(alive(p) for p in pids)
    written = {int(p.read_text()) for p in tmp_path.iterdir() if p.suffix != ".tmp"}
    assert written <= set(pids)
