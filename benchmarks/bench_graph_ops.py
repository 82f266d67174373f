"""Benchmarks of sharded graph operations, each section against a baseline measured in the same run.

Sections (every module-level ``bench_*`` function runs, in definition order; append new ones):

* ``bench_exchange``: halo exchange (``ShardedGraph.exchange``: ghost rows only) versus an
  all-gather of the whole feature tensor (what PhysicsNeMo-style code does), per partition
  method: bytes received over all ranks and time per call.
* ``bench_message_passing``: 15 MeshGraphNet-style message-passing layers, forward + backward,
  on 4 ranks (``ShardedConv``, one exchange per layer) versus 1 process on the whole mesh:
  per-rank time and peak memory.
* ``bench_knn``: ``sharded_knn`` at 2 and 4 ranks versus one cKDTree query of the whole cloud:
  total work summed over ranks (target <= 1.3x the single query), query points shipped, bytes,
  and whether the result is exactly the single-process one.

Usage::

    python benchmarks/bench_graph_ops.py            # full run
    python benchmarks/bench_graph_ops.py --quick    # small inputs, well under a minute
    python benchmarks/bench_graph_ops.py --only exchange
"""
from __future__ import annotations

import argparse
import sys
import gc
import statistics
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import reset_hwm, status_kb  # noqa: E402

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
METHODS = ("kdtree", "morton", "hilbert", "graph")


# ---------------------------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------------------------

def _partition(points, edge_index, num_parts, method):
    import meshshard.partitioners as partitioners

    fn = getattr(partitioners, "partition", None)
    if callable(fn):
        return fn(points, num_parts, method=method, edge_index=edge_index)
    # Fallback while the partitioners are not installed: uneven coordinate slabs.
    from meshshard.partitioners import Partition

    axis = METHODS.index(method) % points.shape[1]
    order = torch.argsort(torch.as_tensor(points)[:, axis], stable=True)
    assign = torch.empty(points.shape[0], dtype=torch.long)
    assign[order] = torch.arange(points.shape[0]) * num_parts // points.shape[0]
    return Partition(assign, num_parts, method=method + "(fallback)")


def _point_cloud_graph(quick: bool):
    """DrivAer body surface points (kNN graph, k=8) for the full run; NACA 0012 mesh for --quick."""
    import numpy as np

    import meshshard as ms

    if quick:
        mesh = ms.read_mesh(DATA / "naca0012_inviscid.su2")
        return "naca0012 mesh", torch.as_tensor(mesh.points), mesh.edge_index()
    pts = np.load(DATA / "drivaer_body_points.npz")["points"].astype("float64")
    return "drivaer kNN k=8", torch.as_tensor(pts), ms.knn_graph(pts, 8, workers=1)


def _median_time(fn, reps: int, warmup: int, barrier) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _peak_mem_mb(fn) -> float:
    """Peak resident memory added by ``fn()`` (MB); Linux: resets the high-water mark first."""
    gc.collect()
    reset_hwm()
    base = status_kb("VmRSS")
    fn()
    return max(0, status_kb("VmHWM") - base) / 1024


def _table(header, rows) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# exchange versus all-gather
# ---------------------------------------------------------------------------------------------

def _exchange_rank(rank, world, ei, parts, feats, reps):
    import meshshard as ms
    from meshshard.distributed import barrier
    from meshshard.distributed import validation
    from meshshard.distributed.autograd import all_gather_v

    res = []
    for part in parts:
        g = ms.ShardedGraph.from_partition(ei, part)
        x = torch.randn(g.num_owned, feats)
        t_ex = _median_time(lambda: g.exchange(x), reps, 2, barrier)
        t_ag = _median_time(lambda: all_gather_v(x, g.sizes), reps, 2, barrier)
        with validation(False):  # hot-loop setting: no per-call cross-rank input check
            t_ex_nv = _median_time(lambda: g.exchange(x), reps, 2, barrier)
            t_ag_nv = _median_time(lambda: all_gather_v(x, g.sizes), reps, 2, barrier)
        elem = x.element_size() * feats
        res.append(dict(method=part.method, ghosts=g.num_ghost, ex_bytes=g.plan.num_recv * elem,
                        ag_bytes=(g.num_global_nodes - g.num_owned) * elem, t_ex=t_ex, t_ag=t_ag,
                        t_ex_nv=t_ex_nv, t_ag_nv=t_ag_nv))
    return res


def bench_exchange(args) -> str:
    from meshshard.testing import run_distributed

    world = 4
    feats = 16 if args.quick else 64
    name, pts, ei = _point_cloud_graph(args.quick)
    parts = [_partition(pts, ei, world, m) for m in METHODS]
    per_rank = run_distributed(_exchange_rank, world, args=(ei, parts, feats, 3 if args.quick else 20), timeout=900)
    rows = []
    for i, part in enumerate(parts):
        rr = [r[i] for r in per_rank]
        ex_b, ag_b = sum(r["ex_bytes"] for r in rr), sum(r["ag_bytes"] for r in rr)
        t = {k: max(r[k] for r in rr) for k in ("t_ex", "t_ag", "t_ex_nv", "t_ag_nv")}
        rows.append([part.method, sum(r["ghosts"] for r in rr), f"{ex_b / 2**20:.2f}", f"{ag_b / 2**20:.2f}",
                     f"{ag_b / max(ex_b, 1):.1f}x", f"{t['t_ex'] * 1e3:.2f}", f"{t['t_ag'] * 1e3:.2f}",
                     f"{t['t_ag'] / t['t_ex']:.1f}x", f"{t['t_ex_nv'] * 1e3:.2f}", f"{t['t_ag_nv'] * 1e3:.2f}",
                     f"{t['t_ag_nv'] / t['t_ex_nv']:.1f}x"])
    head = (f"### exchange vs all-gather: {name}, N={pts.shape[0]}, E={ei.shape[1]}, "
            f"{world} ranks, F={feats} float32 (bytes received over all ranks; time = slowest rank, median)\n")
    head += "(ms columns: with the default per-call cross-rank input check; \"unchecked\": with validation(False))\n"
    return head + _table(["method", "ghost rows", "exchange MB", "all-gather MB", "bytes ratio",
                          "exchange ms", "all-gather ms", "speed-up",
                          "exchange ms unchecked", "all-gather ms unchecked", "speed-up unchecked"], rows)


# ---------------------------------------------------------------------------------------------
# 15-layer message passing: 4 ranks versus 1 process
# ---------------------------------------------------------------------------------------------

def _mp_rank(rank, world, ei, part, cfg):
    import meshshard as ms
    from meshshard.distributed import barrier
    from meshshard.ops import ShardedConv
    from meshshard.models import MeshGraphNetBlock
    from meshshard.ops.conv import all_reduce_gradients

    torch.manual_seed(0)
    # the block this table was measured with: one hidden SiLU layer per MLP, no LayerNorm
    layers = torch.nn.ModuleList(MeshGraphNetBlock(cfg["F"], cfg["D"], cfg["H"], mlp_layers=1, activation=torch.nn.SiLU,
                                                   layer_norm=False) for _ in range(cfg["L"]))
    n = part.num_nodes
    gen = torch.Generator().manual_seed(1)
    x_full = torch.randn(n, cfg["F"], generator=gen)
    e_full = torch.randn(ei.shape[1], cfg["D"], generator=gen)
    if world == 1:
        x, e, run_ei = x_full, e_full, ei

        def layer(blk, h, e_):
            return blk(h, run_ei, e_)
    else:
        g = ms.ShardedGraph.from_partition(ei, part)
        x, e = x_full[g.owned_ids], e_full[g.edge_ids]

        def layer(blk, h, e_):
            return ShardedConv(blk)(h, g, edge_attr=e_)

    def forward():
        h, e_ = x, e
        for blk in layers:
            h, e_ = layer(blk, h, e_)
        return h.square().sum()

    def step():
        layers.zero_grad(set_to_none=True)
        forward().backward()
        all_reduce_gradients(layers)

    # Memory first, in this fresh process: the first step's allocations come from the OS.
    mem = _peak_mem_mb(step)
    saved = _saved_mb(forward)
    t = _median_time(step, cfg["reps"], 1, barrier)
    return dict(t=t, mem=mem, saved=saved, owned=x.shape[0])


def _saved_mb(forward) -> float:
    """Bytes autograd keeps for backward over one forward (distinct storages), in MB."""
    seen, total = set(), [0]

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total[0] += st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = forward()
    del loss
    return total[0] / 2**20


def bench_message_passing(args) -> str:
    import meshshard as ms
    from meshshard.testing import run_distributed

    world = 4
    mesh_name = "naca0012_inviscid.su2" if args.quick else "cylinder_crossflow_re35.vtu"
    mesh = ms.read_mesh(DATA / mesh_name)
    ei = mesh.edge_index()
    cfg = dict(F=16, D=8, H=16, L=15, reps=1) if args.quick else dict(F=32, D=16, H=64, L=15, reps=3)
    rows = []
    # Every configuration in fresh processes (1 thread each), so peak RSS is comparable.
    one = ms.Partition(torch.zeros(mesh.points.shape[0], dtype=torch.long), 1)
    base = run_distributed(_mp_rank, 1, args=(ei, one, cfg), timeout=900)[0]
    rows.append(["1 process (whole mesh)", base["owned"], f"{base['t'] * 1e3:.0f}", "1.00",
                 f"{base['mem']:.0f}", "1.00", f"{base['saved']:.1f}", "1.00"])
    for method in ("graph",) if args.quick else ("kdtree", "graph"):
        part = _partition(mesh.points, ei, world, method)
        res = run_distributed(_mp_rank, world, args=(ei, part, cfg), timeout=900)
        t, mem, saved = (max(r[k] for r in res) for k in ("t", "mem", "saved"))
        rows.append([f"{world} ranks, {part.method}", max(r["owned"] for r in res), f"{t * 1e3:.0f}",
                     f"{t / base['t']:.2f}", f"{mem:.0f}", f"{mem / max(base['mem'], 1e-9):.2f}",
                     f"{saved:.1f}", f"{saved / base['saved']:.2f}"])
    head = (f"### {cfg['L']}-layer MeshGraphNet-block forward+backward: {mesh_name}, N={mesh.points.shape[0]}, "
            f"E={ei.shape[1]}, F={cfg['F']}, edge D={cfg['D']}, hidden={cfg['H']}, float32, 1 thread per rank "
            f"(per rank: slowest rank's median step time; largest peak-RSS increase over the first step; "
            f"largest autograd-saved activations of one forward)\n")
    return head + _table(["run", "max owned nodes", "time/step ms", "time ratio", "peak RSS MB", "RSS ratio",
                          "saved activations MB", "activation ratio"], rows)


# ---------------------------------------------------------------------------------------------
# sharded kNN versus one cKDTree query of the whole cloud
# ---------------------------------------------------------------------------------------------

def _knn_rank(rank, world, ordered, sizes, k, reps):
    from meshshard.distributed import barrier
    from meshshard.ops.knn import sharded_knn

    lo = sum(sizes[:rank])
    mine = ordered[lo:lo + sizes[rank]]
    ei, stats = sharded_knn(mine, k, return_stats=True)  # warm-up, and the result checked by the parent
    walls, cpus = [], []
    for _ in range(reps):
        barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        sharded_knn(mine, k)
        cpu = time.process_time() - c0
        barrier()
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu)
    return dict(ei=ei, stats=stats, wall=statistics.median(walls), cpu=statistics.median(cpus))


def bench_knn(args) -> str:
    """Sharded kNN (query shipping) versus one single-process cKDTree query of the whole cloud.

    Work is counted in kd-tree neighbour slots (a query asking for ``m`` nearest costs ``m``;
    tie-resolving retries included): the baseline is ``N * k``. "shipped" counts query points sent
    to another rank; the all-gather column is what replicating the cloud on every rank would move.
    """
    import numpy as np
    from scipy.spatial import cKDTree

    from meshshard.ops.knn import knn_reference
    from meshshard.testing import run_distributed

    k = 16
    pts = np.load(DATA / "drivaer_body_points.npz")["points"].astype("float64")
    if args.quick:
        pts = pts[np.random.default_rng(0).choice(len(pts), 20000, replace=False)]
    n = len(pts)
    reps = 1 if args.quick else 3
    t_base, c_base = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        cKDTree(pts).query(pts, k=k, workers=1)
        t_base.append(time.perf_counter() - t0)
        c_base.append(time.process_time() - c0)
    t_base, c_base = statistics.median(t_base), statistics.median(c_base)
    base_slots = n * k
    pts_t = torch.from_numpy(pts)
    rows = []
    for world in (2, 4):
        for split in ("kdtree",) if args.quick else ("kdtree", "random"):
            if split == "random":
                assign = torch.randint(0, world, (n,), generator=torch.Generator().manual_seed(0))
                perm = torch.argsort(assign, stable=True)
                sizes = torch.bincount(assign, minlength=world).tolist()
            else:
                part = _partition(pts_t, None, world, split)
                perm, sizes = part.perm, list(part.sizes)
            ordered = pts_t[perm]
            res = run_distributed(_knn_rank, world, args=(ordered, sizes, k, reps), timeout=900)
            exact = torch.equal(torch.cat([r["ei"] for r in res], 1), knn_reference(ordered, k))
            st = [r["stats"] for r in res]
            slots = sum(s["tree_slots"] for s in st)
            shipped = sum(s["queries_sent"] for s in st)
            cand = sum(s["candidates_received"] for s in st)
            mb = sum(s["bytes_sent"] for s in st) / 2**20
            ag_mb = (world - 1) * n * 3 * 8 / 2**20
            wall = max(r["wall"] for r in res)
            cpu = sum(r["cpu"] for r in res)
            ratio = slots / base_slots
            rows.append([world, split, f"{ratio:.3f} ({'met' if ratio <= 1.3 else 'MISSED'})",
                         f"{shipped} ({shipped / n:.1%})", cand,
                         f"{mb:.2f}", f"{ag_mb:.1f}", f"{cpu / c_base:.2f}", f"{wall / t_base:.2f}",
                         "yes" if exact else "NO"])
    head = (f"### sharded kNN vs one cKDTree query: DrivAer body points, N={n}, k={k}, float64\n"
            f"(baseline: cKDTree build + query, 1 thread: {t_base * 1e3:.0f} ms wall, {base_slots} slots; "
            "work = kd-tree neighbour slots summed over ranks / N*k; CPU = process time summed over ranks / "
            "baseline's; wall = slowest rank / baseline, median of runs; exact = equal to knn_reference)\n")
    return head + _table(["ranks", "split", "work ratio (target <= 1.3)", "queries shipped", "candidates returned",
                          "MB sent", "all-gather MB", "CPU ratio", "wall ratio", "exact"], rows)


# ---------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, well under a minute")
    parser.add_argument("--only", default=None, help="run only the bench_<name> section(s), comma separated")
    args = parser.parse_args()
    sections = [(k[len("bench_"):], v) for k, v in globals().items() if k.startswith("bench_") and callable(v)]
    if args.only:
        wanted = set(args.only.split(","))
        sections = [(k, v) for k, v in sections if k in wanted]
    print(f"# bench_graph_ops ({'quick' if args.quick else 'full'}); torch {torch.__version__}\n")
    for name, fn in sections:
        t0 = time.perf_counter()
        print(fn(args))
        print(f"\n({name}: {time.perf_counter() - t0:.1f}s)\n", flush=True)


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
