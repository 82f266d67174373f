"""A rank that dies (SIGKILL) mid-collective or mid-training-step: every survivor exits non-zero
within seconds with a RankLostError naming the dead rank, instead of waiting for the timeout.

The ranks are plain subprocesses (this file run as a script), not run_distributed: its parent
stops every rank as soon as one dies, which is what it should do for tests but hides what the
survivors themselves do.
"""
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORLD = 3
VICTIM = 1
DEADLINE_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _collective(rank: int) -> None:
    """Ranks loop over collectives; the victim dies before its third, while the others wait in it."""
    import torch

    import meshshard.distributed as msd
    from meshshard.distributed.autograd import all_gather_v

    x = torch.ones(300_000, dtype=torch.float64)  # 2.4 MB per rank: all_gather_v goes point-to-point
    for step in range(10):
        if rank == VICTIM and step == 2:
            _die()
        msd.all_reduce(torch.ones(4))
        all_gather_v(x, [x.shape[0]] * WORLD)


def _training(rank: int) -> None:
    """A tiny sharded MeshGraphNet; the victim dies inside its third forward pass (mid halo exchange)."""
    import torch

    from meshshard.graph import ShardedGraph
    from meshshard.models import MeshGraphNet
    from meshshard.models.training import train_step
    from meshshard.partitioners import Partition

    side = 6
    ids = torch.arange(side * side).view(side, side)
    right = torch.stack([ids[:, :-1].reshape(-1), ids[:, 1:].reshape(-1)])
    down = torch.stack([ids[:-1].reshape(-1), ids[1:].reshape(-1)])
    ei = torch.cat([right, down, right.flip(0), down.flip(0)], 1)
    g = ShardedGraph.from_partition(ei, Partition(torch.arange(side * side) * WORLD // (side * side), WORLD))
    gen = torch.Generator().manual_seed(0)
    x_all, y_all = torch.randn(side * side, 3, generator=gen), torch.randn(side * side, 1, generator=gen)
    x, y = x_all[g.owned_ids], y_all[g.owned_ids]
    e = torch.ones(g.edge_index.shape[1], 2)
    model = MeshGraphNet(3, 2, 1, hidden=8, num_layers=3)
    model.broadcast_parameters(src=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    calls = [0]

    def hook(module, inputs):
        calls[0] += 1
        if rank == VICTIM and calls[0] == 3 * 3 + 2:  # step 3, second processor block
            _die()

    for block in model.processor:
        block.register_forward_pre_hook(hook)
    for _ in range(20):
        train_step(model, opt, x, e, y, graph=g)


def _launch(scenario: str):
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, scenario, str(r), str(port)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(WORLD)]
    return procs


def _wait(runs):
    """Poll every rank; the clock for the survivors starts when their victim dies (start-up on a
    loaded machine alone can take tens of seconds)."""
    death, ended = {}, {}
    start = time.monotonic()
    while len(ended) < sum(len(p) for p in runs.values()):
        now = time.monotonic()
        for scenario, procs in runs.items():
            for rank, p in enumerate(procs):
                if (scenario, rank) not in ended and p.poll() is not None:
                    ended[scenario, rank] = now
                    if rank == VICTIM:
                        death[scenario] = now
            since = now - death.get(scenario, now)
            if since > DEADLINE_S or now - start > 200:
                for q in (q for ps in runs.values() for q in ps):
                    q.kill()
                state = f"{since:.0f} s after rank {VICTIM} died" if scenario in death else f"rank {VICTIM} never died"
                pytest.fail(f"{scenario}: ranks still running ({state}, {now - start:.0f} s in all): a hang")
        time.sleep(0.2)
    return {s: [(p.returncode, p.stdout.read(), ended[s, r] - death[s]) for r, p in enumerate(procs)]
            for s, procs in runs.items()}


@pytest.mark.timeout(240)
def test_killed_rank_is_named_by_every_survivor():
    runs = {s: _launch(s) for s in ("collective", "training")}  # both groups at once: half the wall time
    for scenario, results in _wait(runs).items():
        assert results[VICTIM][0] == -signal.SIGKILL, results[VICTIM][1]
        for rank, (code, out, after) in enumerate(results):
            if rank == VICTIM:
                continue
            assert code != 0 and "RankLostError" in out, f"{scenario}, rank {rank}:\n{out}"
            assert f"lost rank(s) [{VICTIM}" in out, f"{scenario}, rank {rank}:\n{out}"
            assert f"rank {VICTIM}: no heartbeat" in out, f"{scenario}, rank {rank}:\n{out}"
            assert after < DEADLINE_S, f"{scenario}, rank {rank} exited {after:.0f} s after rank {VICTIM} died"


if __name__ == "__main__":
    scenario, rank, port = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    import torch

    import meshshard.distributed as msd

    torch.set_num_threads(1)
    msd.init_distributed(backend="gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    {"collective": _collective, "training": _training}[scenario](rank)
    msd.destroy_distributed()
