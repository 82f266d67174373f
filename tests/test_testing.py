"""meshshard.testing.keep_workers: kept ranks are reused, start every call as a fresh process
would, and are replaced after a failure; without them every call spawns and reaps its own ranks.
(run_distributed's error and timeout reporting: tests/distributed/test_comm.py.)"""
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import meshshard.distributed as msd
from meshshard.tensor import ShardTensor, _registry
from meshshard.testing import keep_workers, run_distributed
from tests._process import alive

_MARK = "MESHSHARD_TEST_KEPT_MARK"


def _state(rank, world_size, where):
    """What a call sees of the process; then changes all of it (``where``: a folder to chdir to)."""
    seen = dict(pid=os.getpid(), mark=os.environ.get(_MARK), dtype=torch.get_default_dtype(), cwd=os.getcwd(),
                grad=torch.is_grad_enabled(), port=os.environ["MASTER_PORT"],
                world=msd.get_world_size(), rank=msd.get_rank(), handlers=len(_registry.FUNCTION_HANDLERS))
    ShardTensor.register_function_handler(torch.dot, lambda *args, **kwargs: None)  # a user handler
    os.environ[_MARK] = "set"
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    os.chdir(where)
    return seen


def _fail_on_one(rank, world_size):
    if rank == 1:
        raise ValueError("rank one failed")
    msd.barrier()  # never completes: the parent must kill rank 0 (and the kept ranks)


@pytest.mark.timeout(600)  # a hang guard: about 20 s on an idle machine, minutes under heavy load
def test_kept_ranks_are_reused_reset_and_replaced(tmp_path):
    keep_workers(True)  # on for the whole session already (tests/conftest.py); said here for clarity
    try:
        first = run_distributed(_state, 2, args=(str(tmp_path),), timeout=120)
        second = run_distributed(_state, 3, args=(str(tmp_path),), timeout=120)
        for r in range(2):
            assert second[r]["pid"] == first[r]["pid"], "a kept rank was not reused"
        assert second[2]["pid"] not in {s["pid"] for s in first}
        for s in second:  # every change of the previous call undone
            assert s["mark"] is None and s["dtype"] == torch.float32 and s["grad"]
            assert s["handlers"] == 0, "a user handler of the previous call is still registered"
            assert s["cwd"] == first[0]["cwd"] != str(tmp_path)
        assert [(s["rank"], s["world"]) for s in second] == [(0, 3), (1, 3), (2, 3)]
        assert second[0]["port"] != first[0]["port"], "each call needs its own fresh group"

        with pytest.raises(ValueError, match="rank one failed"):
            run_distributed(_fail_on_one, 3, timeout=120)
        assert not any(alive(s["pid"]) for s in second), "a failed call must kill every kept rank"
        third = run_distributed(_state, 2, args=(str(tmp_path),), timeout=120)
        assert all(t["mark"] is None and t["world"] == 2 for t in third)

        keep_workers(False)
        assert not any(alive(t["pid"]) for t in third), "keep_workers(False) must stop the kept ranks"
        fresh = run_distributed(_state, 2, args=(str(tmp_path),), timeout=120)
        assert not any(alive(f["pid"]) for f in fresh), "without kept ranks each call reaps its own"
        assert all(f["mark"] is None and f["dtype"] == torch.float32 for f in fresh)
        with pytest.raises(ValueError, match="rank one failed"):
            run_distributed(_fail_on_one, 2, timeout=120)
    finally:
        keep_workers(True)


def _pid(rank, world_size):
    return os.getpid()


def test_kept_ranks_exit_when_the_parent_is_killed():
    """A session killed outright (SIGKILL: no atexit) must not leave its kept ranks behind."""
    code = ("import os, signal, sys\n"
            "from meshshard.testing import keep_workers, run_distributed\n"
            "from tests.test_testing import _pid\n"
            "if __name__ == '__main__':\n"
            "    keep_workers(True)\n"
            "    print(*run_distributed(_pid, 2, timeout=120), flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=200)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pids = [int(p) for p in proc.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(p) for p in pids), "kept ranks outlived their killed parent"
