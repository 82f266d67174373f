"""meshshard on one CUDA GPU against plain PyTorch, measured in the same run (needs CUDA).

    python benchmarks/bench_gpu.py                 # MeshGraphNet on ~100k nodes, kNN on 50k / 200k points
    python benchmarks/bench_gpu.py --quick         # small sizes, seconds (1.6k nodes, 1k / 3k points)
    python benchmarks/bench_gpu.py --quick --device cpu   # the same script on the CPU (gloo):
                                                          # a smoke test of the code, not a GPU figure

Both sections run in one NCCL process group of one rank (one GPU: NCCL refuses two ranks on one
device), so meshshard's code runs its NCCL path.

1. **MeshGraphNet training step** (forward, backward, Adam; float32, hidden 128, 15 layers by
   default) on a triangulated ``s x s`` grid (~6 directed edges per node, no gmsh needed): the
   plain model on the whole graph (``model(x, edge_index, edge_attr)``) against
   ``DomainParallel(model)`` on a one-part :class:`meshshard.ShardedGraph` (halo exchange, the
   ShardTensor wrapping and the gradient hooks all run). Steps of the two kinds alternate; the
   table gives the median time per step and the peak CUDA memory of a step (allocated above what
   was allocated before it), each as a ratio meshshard / plain.
2. **kNN graph** (``sharded_knn``, k = 8, float64 points uniform in the unit cube): the GPU
   backend (chunked brute force on CUDA) against the CPU backend (scipy's cKDTree) on the same
   points, time of one call (median of 3 after a warm-up), ratio GPU / CPU, and whether the two
   graphs are equal.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def grid_graph(side: int):
    """Points of a ``side x side`` grid and the directed edges of its triangulation (right, up,
    one diagonal; both directions). Returns ``pos [N, 2]``, ``edge_index [2, E]``."""
    ij = torch.arange(side * side).reshape(side, side)
    pairs = [(ij[:, :-1], ij[:, 1:]), (ij[:-1, :], ij[1:, :]), (ij[:-1, :-1], ij[1:, 1:])]
    a = torch.cat([p[0].reshape(-1) for p in pairs])
    b = torch.cat([p[1].reshape(-1) for p in pairs])
    ei = torch.stack([torch.cat([a, b]), torch.cat([b, a])])
    g = torch.arange(side, dtype=torch.float64) / (side - 1)
    pos = torch.stack(torch.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    return pos, ei


def _device(device_type):
    if device_type == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _sync_time(fn, dev):
    _sync(dev)
    t0 = time.perf_counter()
    out = fn()
    _sync(dev)
    return time.perf_counter() - t0, out


def _memory(dev):
    """(allocated now, peak since the last reset) on a CUDA device; zeros on the CPU."""
    if dev.type != "cuda":
        return 0, 0
    return torch.cuda.memory_allocated(dev), torch.cuda.max_memory_allocated(dev)


def _mgn(rank, world, cfg):
    import meshshard as ms
    from meshshard.models import MeshGraphNet

    dev = _device(cfg["device"])
    pos, ei = grid_graph(cfg["side"])
    n = pos.shape[0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 6, generator=gen).to(dev)
    y = torch.randn(n, 3, generator=gen).to(dev)
    rel = pos[ei[0]] - pos[ei[1]]
    e = torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1).float().to(dev)
    g = ms.ShardedGraph.from_partition(ei, ms.Partition(torch.zeros(n, dtype=torch.long), 1)).to(dev)
    ei = ei.to(dev)

    def make():
        torch.manual_seed(0)
        return MeshGraphNet(6, 3, 3, hidden=cfg["hidden"], num_layers=cfg["layers"]).to(dev)

    plain, sharded = make(), make()
    dp = ms.DomainParallel(sharded)
    opts = {False: torch.optim.Adam(plain.parameters(), lr=1e-4), True: torch.optim.Adam(sharded.parameters(), lr=1e-4)}
    owned = g.owned_ids.to(dev)
    x_own, y_own, e_loc = x[owned], y[owned], e[g.edge_ids]

    def step(use_ms):
        opt = opts[use_ms]
        opt.zero_grad(set_to_none=True)
        if use_ms:
            loss = torch.nn.functional.mse_loss(dp(x_own, g, edge_attr=e_loc).to_local(), y_own)
        else:
            loss = torch.nn.functional.mse_loss(plain(x, ei, e), y)
        loss.backward()
        opt.step()
        return loss.detach()

    times = {False: [], True: []}
    peaks = {False: 0, True: 0}
    losses = {}
    for i in range(2 * (cfg["warmup"] + cfg["steps"])):
        use_ms = i % 2 == 1
        _sync(dev)
        base = _memory(dev)[0]
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        sec, loss = _sync_time(lambda: step(use_ms), dev)
        if i >= 2 * cfg["warmup"]:
            times[use_ms].append(sec)
            peaks[use_ms] = max(peaks[use_ms], _memory(dev)[1] - base)
        losses.setdefault(use_ms, float(loss))
    return dict(nodes=n, edges=int(ei.shape[1]), plain=statistics.median(times[False]),
                ms=statistics.median(times[True]), plain_peak=peaks[False], ms_peak=peaks[True],
                loss_diff=abs(losses[True] - losses[False]) / abs(losses[False]))


def _knn(rank, world, sizes, device_type):
    from meshshard.ops.knn import sharded_knn

    dev = _device(device_type)
    rows = []
    for n in sizes:
        pts = torch.rand(n, 3, generator=torch.Generator().manual_seed(n), dtype=torch.float64)
        pts_gpu = pts.to(dev)
        res = {}
        for name, p, backend in (("cpu", pts, "scipy"), ("torch", pts_gpu, "torch"), ("scipy_on_cuda", pts_gpu, "scipy")):
            sharded_knn(p, 8, backend=backend)  # warm-up
            ts = []
            for _ in range(3):
                sec, ei = _sync_time(lambda: sharded_knn(p, 8, backend=backend), dev)
                ts.append(sec)
            res[name] = (statistics.median(ts), ei.cpu())
        rows.append(dict(n=n, **{k: v[0] for k, v in res.items()},
                         equal=all(torch.equal(res["cpu"][1], v[1]) for v in res.values())))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes")
    p.add_argument("--side", type=int, default=None, help="grid side (nodes = side^2; default 316, quick 60)")
    p.add_argument("--hidden", type=int, default=None, help="default 128 (quick 32)")
    p.add_argument("--layers", type=int, default=None, help="default 15 (quick 4)")
    p.add_argument("--steps", type=int, default=None, help="timed steps of each kind (default 5, quick 2)")
    p.add_argument("--knn-sizes", default=None, help="comma-separated point counts (default 50000,200000)")
    p.add_argument("--only", default="mgn,knn", help="sections to run, comma separated (mgn, knn)")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: run the script on the CPU with gloo (a smoke test; its figures are no GPU figures)")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_gpu.py needs a CUDA device; none is available (--device cpu runs it as a smoke test)",
              file=sys.stderr)
        return 2
    from meshshard.testing import run_distributed

    cfg = dict(side=args.side or (40 if args.quick else 316), hidden=args.hidden or (32 if args.quick else 128),
               layers=args.layers or (4 if args.quick else 15), warmup=1, steps=args.steps or (2 if args.quick else 5),
               device=args.device)
    knn_sizes = [int(s) for s in (args.knn_sizes or ("1000,3000" if args.quick else "50000,200000")).split(",")]
    only = set(args.only.split(","))
    backend = "nccl" if args.device == "cuda" else "gloo"
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU (smoke test: no GPU figures)"
    print(f"device: {name}; torch {torch.__version__}; one {backend} rank")
    if "mgn" in only:
        _print_mgn(run_distributed(_mgn, 1, args=(cfg,), backend=backend, timeout=1800)[0], cfg)
    if "knn" in only:
        _print_knn(run_distributed(_knn, 1, args=(knn_sizes, args.device), backend=backend, timeout=1800)[0],
                   "CUDA" if args.device == "cuda" else "CPU")
    return 0


def _print_mgn(m, cfg):
    print(f"\nMeshGraphNet training step, float32, hidden {cfg['hidden']}, {cfg['layers']} layers, "
          f"grid {m['nodes']} nodes / {m['edges']} directed edges, median of {cfg['steps']} steps each (alternating)")
    print("| plain ms/step | meshshard ms/step | time ratio | plain peak MiB | meshshard peak MiB | memory ratio | first-loss rel. diff |")
    print("|---|---|---|---|---|---|---|")
    mem = (f"{m['plain_peak'] / 2**20:.0f} | {m['ms_peak'] / 2**20:.0f} | {m['ms_peak'] / m['plain_peak']:.3f}"
           if m["plain_peak"] else "n/a | n/a | n/a")  # CUDA allocator statistics only
    print(f"| {m['plain'] * 1e3:.1f} | {m['ms'] * 1e3:.1f} | {m['ms'] / m['plain']:.3f} | {mem} | {m['loss_diff']:.1e} |")


def _print_knn(rows, dev):
    print("\nsharded_knn, k=8, float64 points in the unit cube, one call (median of 3)")
    print(f"| points | CPU points, scipy s | {dev} points, torch s | {dev} points, scipy s | torch / CPU | "
          f"{dev} scipy / CPU | graphs equal |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['cpu']:.3f} | {r['torch']:.3f} | {r['scipy_on_cuda']:.3f} | {r['torch'] / r['cpu']:.3f} | "
              f"{r['scipy_on_cuda'] / r['cpu']:.3f} | {r['equal']} |")


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
