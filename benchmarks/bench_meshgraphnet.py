"""One MeshGraphNet training step on a gmsh mesh at world sizes 1, 2 and 4 (gloo, local processes).

    python benchmarks/bench_meshgraphnet.py --quick                 # ~6k nodes, hidden 64, 4 layers
    python benchmarks/bench_meshgraphnet.py --nodes 500000          # the target size (needs a big machine)
    python benchmarks/bench_meshgraphnet.py --nodes 20000 --hidden 128 --layers 15

Per world size P it reports, for the worst rank: the peak memory of the training step (peak RSS
during the step minus RSS before it, i.e. activations + gradients + temporaries; Linux VmHWM reset
through /proc/self/clear_refs; freed heap given back with malloc_trim before) as a fraction of the
single-process peak (target <= 1/P + 0.1), the
time per step (forward + backward + gradient all-reduce + Adam), and the fraction of it spent in
halo exchanges (forward and backward, timed around ``ShardedGraph.exchange``) and the gradient
all-reduce. The baseline P = 1 is measured in the same run, in the same kind of process.

A second table compares the two ways of summing the replicated gradients at every P > 1 (P = 2 with
``--quick``): today's
explicit ``model.all_reduce_gradients()`` after backward, and :class:`meshshard.DomainParallel`,
whose hooks reduce buckets of gradients asynchronously during backward (time per step and their
ratio; the two kinds of step alternate in one process group, so both see the same machine load).

Memory: one float32 step needs about ``192 * N * hidden * layers`` bytes of activations on a gmsh
triangle mesh (about 6 directed edges per node), about ``46 * N * hidden * layers`` with
``--checkpoint`` (measured at 8k nodes: 360 and 87 KiB per node at hidden 128, 15 layers). At
500k nodes that is ~172 GiB (~42 GiB with --checkpoint) for P = 1; the script stops early, with
this estimate, when it exceeds the machine's available memory (``--force`` runs anyway).
The ranks run with ``MALLOC_MMAP_THRESHOLD_=131072`` so that large tensors are mmapped and freed
memory leaves the RSS at once (glibc's heap otherwise keeps it and the RSS peak overstates the
live peak by up to ~40% at small sizes).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import hwm_kb, malloc_trim, reset_hwm, rss_kb  # noqa: E402


class _Timer:
    def __init__(self):
        self.seconds = 0.0


def _timed_exchange(exchange, timer: _Timer):
    """Wrap g.exchange so that its forward AND backward time is accumulated in ``timer``."""

    class Tic(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.t = None
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            timer.seconds += time.perf_counter() - Toc.t_back  # exchange backward ran since Toc.backward
            return grad

    class Toc(torch.autograd.Function):
        t_back = 0.0

        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            Toc.t_back = time.perf_counter()
            return grad

    def wrapped(x):
        t0 = time.perf_counter()
        out = Toc.apply(exchange(Tic.apply(x)))
        timer.seconds += time.perf_counter() - t0
        return out

    return wrapped


BYTES_PER_NODE_HIDDEN_LAYER = {False: 192.0, True: 46.0}  # measured, float32, ~6 directed edges per node


def estimate_step_bytes(nodes: int, hidden: int, layers: int, checkpoint: bool) -> float:
    """Rough peak memory of one single-process float32 training step (activations + temporaries)."""
    return BYTES_PER_NODE_HIDDEN_LAYER[bool(checkpoint)] * nodes * hidden * max(layers, 1)


def _available_bytes() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024.0
    except OSError:
        pass
    return float("inf")


def _rank(rank, world, shard_dir, cfg):
    import meshshard as ms
    from meshshard.models import MeshGraphNet, global_mse_loss

    torch.set_num_threads(max(1, cfg["cores"] // world))
    g = ms.ShardedGraph.load(shard_dir)
    n_own = g.num_owned
    x = g.node_data["x"][:n_own].float()
    y = g.node_data["y"][:n_own].float()
    e = g.edge_data["edge_attr"].float()
    torch.manual_seed(0)
    model = MeshGraphNet(x.shape[1], e.shape[1], y.shape[1], hidden=cfg["hidden"], num_layers=cfg["layers"],
                         checkpoint=cfg["checkpoint"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    comm = _Timer()
    g.exchange = _timed_exchange(g.exchange, comm)
    dp = ms.DomainParallel(model, g) if cfg["compare"] else None

    def step(hooks=False):
        opt.zero_grad(set_to_none=True)
        if hooks:  # gradients summed by DomainParallel's hooks during backward
            loss = global_mse_loss(dp(x, g, e).to_local(), y)
            loss.backward()
        else:
            loss = global_mse_loss(model(x, e, graph=g), y)
            loss.backward()
            t0 = time.perf_counter()
            model.all_reduce_gradients()
            comm.seconds += time.perf_counter() - t0
        opt.step()
        return float(loss.detach())

    if cfg["compare"]:  # alternate the two kinds of step in one group, so both see the same load
        timed = {False: 0.0, True: 0.0}
        for i in range(cfg["warmup"] + 2 * cfg["steps"]):
            hooks = i % 2 == 1
            ms.distributed.barrier()
            t0 = time.perf_counter()
            step(hooks)
            if i >= cfg["warmup"]:
                timed[hooks] += time.perf_counter() - t0
        return dict(rank=rank, explicit=timed[False] / cfg["steps"], hooks=timed[True] / cfg["steps"])

    for _ in range(cfg["warmup"]):
        step()
    gc.collect()
    malloc_trim()
    ms.distributed.barrier()
    rss0 = rss_kb()
    hwm_ok = reset_hwm()
    comm.seconds = 0.0
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        step()
    seconds = (time.perf_counter() - t0) / cfg["steps"]
    peak = (hwm_kb() - rss0) * 1024 if hwm_ok else float("nan")
    return dict(rank=rank, owned=n_own, ghost=g.num_ghost, edges=int(g.edge_index.shape[1]), seconds=seconds,
                comm=comm.seconds / cfg["steps"], peak=peak)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small mesh and model, finishes in well under a minute")
    p.add_argument("--nodes", type=int, default=None, help="target mesh nodes (default 500000; quick 6000)")
    p.add_argument("--hidden", type=int, default=None, help="default 128 (quick 64)")
    p.add_argument("--layers", type=int, default=None, help="default 15 (quick 4)")
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--steps", type=int, default=1, help="timed steps (after one warm-up step in --quick)")
    p.add_argument("--method", default="kdtree")
    p.add_argument("--checkpoint", action="store_true", help="activation checkpointing per processor block")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads shared by the ranks")
    p.add_argument("--force", action="store_true", help="run even when the memory estimate exceeds available memory")
    args = p.parse_args(argv)
    cfg = dict(nodes=6000, hidden=64, layers=4, warmup=1) if args.quick else dict(nodes=500000, hidden=128, layers=15, warmup=0)
    for k in ("nodes", "hidden", "layers"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    cfg.update(steps=args.steps, checkpoint=args.checkpoint, cores=args.cores, compare=False)
    worlds = [int(w) for w in args.worlds.split(",")]
    need = estimate_step_bytes(cfg["nodes"], cfg["hidden"], cfg["layers"], cfg["checkpoint"])
    avail = _available_bytes()
    print(f"estimated single-process step memory: {need / 2**30:.1f} GiB (available {avail / 2**30:.1f} GiB)", flush=True)
    if need > 0.85 * avail and not args.force:
        fit = int(0.85 * avail / estimate_step_bytes(1, cfg["hidden"], cfg["layers"], cfg["checkpoint"]))
        print(f"stopping: the P=1 step would not fit; about {fit:,} nodes fit here at hidden {cfg['hidden']}, "
              f"{cfg['layers']} layers{' with' if cfg['checkpoint'] else ' without'} --checkpoint "
              f"(pass --nodes, --checkpoint, or --force)", file=sys.stderr)
        return 3
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # inherited by the spawned ranks

    import meshshard as ms
    from meshshard.datasets import DatasetStats, sample_moments
    from meshshard.datasets.fields import mesh_arrays
    from meshshard.datasets.synthetic import cylinder_channel_mesh
    from meshshard.graph import save_parts
    from meshshard.testing import run_distributed

    t0 = time.perf_counter()
    mesh = cylinder_channel_mesh(cfg["nodes"])
    d = mesh_arrays(mesh, ["velocity", "pos"], ["pressure"], ["cylinder", "inlet", "outlet", "walls"], dtype=torch.float64)
    st = DatasetStats.from_sample_moments([sample_moments(type("D", (), d))])
    x = torch.cat([st.x.normalize(d["x"]), d["node_type"]], 1).float()
    y, e = st.y.normalize(d["y"]).float(), st.edge_attr.normalize(d["edge_attr"]).float()
    ei = d["edge_index"]
    print(f"mesh: gmsh cylinder channel, {mesh.num_nodes} nodes, {ei.shape[1]} directed edges ({time.perf_counter() - t0:.1f} s); "
          f"MeshGraphNet hidden={cfg['hidden']} layers={cfg['layers']} float32"
          f"{' + activation checkpointing' if cfg['checkpoint'] else ''}; {cfg['cores']} cores shared by the ranks; "
          f"{cfg['steps']} timed step(s)", flush=True)
    rows, hook_rows = [], []
    hook_worlds = [2] if args.quick else [w for w in worlds if w > 1]  # --quick: P=2 only, to stay short
    with tempfile.TemporaryDirectory() as tmp:
        for world in worlds:
            part = ms.partition(mesh.points, world, method=args.method, edge_index=ei)
            shard = Path(tmp) / f"p{world}"
            save_parts(shard, ei, part, node_data={"x": x, "y": y}, edge_data={"edge_attr": e}, progress=False)
            t1 = time.perf_counter()
            res = run_distributed(_rank, world, args=(str(shard), cfg), timeout=3600)
            print(f"  P={world}: done in {time.perf_counter() - t1:.1f} s", flush=True)
            rows.append((world, res))
            if world in hook_worlds:
                res = run_distributed(_rank, world, args=(str(shard), dict(cfg, compare=True)), timeout=3600)
                hook_rows.append((world, res))
    base = rows[0][1][0]
    print()
    print("| P | max owned nodes | max ghosts | peak step memory (worst rank) | fraction of P=1 | target 1/P+0.1 | s/step | speedup | comm fraction |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world, res in rows:
        peak = max(r["peak"] for r in res)
        sec = max(r["seconds"] for r in res)
        comm = max(r["comm"] / r["seconds"] for r in res)
        frac = peak / base["peak"]
        print(f"| {world} | {max(r['owned'] for r in res)} | {max(r['ghost'] for r in res)} | {peak / 2**20:.0f} MiB | "
              f"{frac:.3f} | {1 / world + 0.1:.3f} | {sec:.2f} | {base['seconds'] / sec:.2f} | {comm:.3f} |")
    print()
    print("| P | s/step, explicit all_reduce_gradients() | s/step, DomainParallel hooks | ratio hooks / explicit |")
    print("|---|---|---|---|")
    for world, res in hook_rows:
        base_sec = max(r["explicit"] for r in res)
        sec = max(r["hooks"] for r in res)
        print(f"| {world} | {base_sec:.3f} | {sec:.3f} | {sec / base_sec:.2f} |")
    return 0


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
