"""Large meshes: `meshshard preprocess`, and one MeshGraphNet training step at 1, 2 and 4 ranks.

    python benchmarks/bench_scale.py --quick                  # one 2k-node mesh, P = 1, 2
    python benchmarks/bench_scale.py                          # 0.5M, 1M, 2M nodes (+ the step mesh)
    python benchmarks/bench_scale.py --sizes 500000 --max-memory-gb 20

Meshes: :func:`meshshard.datasets.synthetic.jittered_grid_mesh` (a jittered structured grid,
triangulated, nodes renumbered at random, analytic velocity and pressure fields), written as
``.vtu`` with meshio.

1. ``meshshard preprocess MESH -k P --features velocity pos --targets pressure`` (a subprocess, one
   partition into the largest P): wall time, and its peak resident memory (the child's
   ``ru_maxrss``) as a multiple of the mesh arrays (points, triangles and point fields, the bytes
   that any reader must hold).
2. One training step (``DomainParallel(MeshGraphNet)``, hidden 64, 15 processor layers, activation
   checkpointing per block, float32, Adam, the dataset's normalised inputs) at P = 1, 2 and 4 local
   gloo ranks. Per P: the worst rank's peak step memory (its VmHWM during the step minus its RSS
   before it, VmHWM reset through /proc/self/clear_refs) as a fraction of P = 1 (target
   <= 1/P + 0.05), the time per step, and the share of it spent in halo exchanges (forward and
   backward, timed around ``ShardedGraph.exchange``).
3. The same step at P = 1 against a plain PyTorch MeshGraphNet written here (index_select +
   index_add_, checkpointed blocks, no meshshard): it loads the same weights, must give the same
   output (checked before timing), and the two kinds of step alternate in one process so that both
   see the same machine load (target: meshshard / plain <= 1.1).

4. A ``.pvtu`` of ``--pieces-nodes`` nodes in 8 pieces read piece-wise
   (:func:`meshshard.ops.pieces.read_pieces_distributed`: read + numbering + partition + halo) at
   P = 4 local gloo ranks against one process reading the merged file and building the same graph,
   partition and every part's halo: the worst rank's peak memory (VmHWM during the step minus its
   RSS before it) as a fraction of the one process's (target <= 1/P + 0.1), and the wall times.

Memory is estimated before anything runs: a checkpointed step keeps every block's input node and
edge latents, about ``46 * N * hidden * layers`` bytes on a triangle mesh (6 directed edges per
node; constant from benchmarks/bench_meshgraphnet.py), and preprocessing about
``PREPROCESS_MULTIPLE`` times the mesh arrays. A size or world size whose estimate (summed over
its ranks) exceeds ``--max-memory-gb`` is skipped with the estimate printed, never swapped. The
issue's sizes do not fit a training step on a small machine, so the step also runs on the smaller
``--step-nodes`` mesh, labelled as such in the tables.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import hwm_kb, malloc_trim, reset_hwm, rss_kb  # noqa: E402
from bench_meshgraphnet import _timed_exchange, _Timer, estimate_step_bytes  # noqa: E402

# Measured peak RSS of `meshshard preprocess` / bytes of the mesh arrays on these meshes (rounded up).
PREPROCESS_MULTIPLE = 16.0  # 14.6 at 500k nodes (610 MiB), the imports included
PROCESS_BYTES = 0.5 * 2**30  # RSS of one rank before its step (python, torch, gloo, its shard)
FEATURES, TARGETS = ["velocity", "pos"], ["pressure"]


# ---------------------------------------------------------------------------- plain PyTorch model
def _plain_mlp(n_in: int, hidden: int, n_out: int, layer_norm: bool) -> nn.Sequential:
    layers = [nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_out)]
    return nn.Sequential(*layers, *([nn.LayerNorm(n_out)] if layer_norm else []))


class _PlainBlock(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.edge_mlp = _plain_mlp(3 * hidden, hidden, hidden, True)
        self.node_mlp = _plain_mlp(2 * hidden, hidden, hidden, True)

    def forward(self, x, e, src, dst):
        e = e + self.edge_mlp(torch.cat([e, x.index_select(0, src), x.index_select(0, dst)], 1))
        agg = x.new_zeros(x.shape).index_add_(0, dst, e)
        return x + self.node_mlp(torch.cat([x, agg], 1)), e


class PlainMeshGraphNet(nn.Module):
    """MeshGraphNet in plain PyTorch, with the parameter names of meshshard's (same state dict)."""

    def __init__(self, node_in: int, edge_in: int, node_out: int, hidden: int, num_layers: int):
        super().__init__()
        self.node_encoder = _plain_mlp(node_in, hidden, hidden, True)
        self.edge_encoder = _plain_mlp(edge_in, hidden, hidden, True)
        self.processor = nn.ModuleList(_PlainBlock(hidden) for _ in range(num_layers))
        self.decoder = _plain_mlp(hidden, hidden, node_out, False)

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index[0], edge_index[1]
        h, e = self.node_encoder(x), self.edge_encoder(edge_attr)
        for block in self.processor:
            h, e = checkpoint(block, h, e, src, dst, use_reentrant=False)
        return self.decoder(h)


# ---------------------------------------------------------------------------- measurements
# Runs `meshshard preprocess` in this child with its phases wrapped, then (after the command's memory peak is
# taken) reads the mesh again, builds its edges and times METIS on them: the baseline of the same run. Total =
# child start (before importing meshshard) to the end of the command. Peak = the process's VmHWM during the
# command (imports included), and the RSS once imports are done.
_PREPROCESS_CHILD = r"""
import json, sys, time
t_start = time.perf_counter()
import meshshard.cli, meshshard.io, meshshard.io.graph, meshshard.partitioners, meshshard.graph

def status(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(field + ":"))

times, mem = {}, {}

def timed(module, attr, phase):
    fn = getattr(module, attr)
    def wrapper(*a, **k):
        if phase == "read" and "rss_before" not in mem:  # imports and argument checks are done
            mem["rss_before"], mem["t_imports"] = status("VmRSS"), time.perf_counter() - t_start
        t0 = time.perf_counter()
        out = fn(*a, **k)
        times[phase] = times.get(phase, 0.0) + time.perf_counter() - t0
        return out
    setattr(module, attr, wrapper)
    return fn

read_mesh = timed(meshshard.io, "read_mesh", "read")
mesh_graph = timed(meshshard.io.graph, "mesh_graph", "edges")
partition = timed(meshshard.partitioners, "partition", "partition")
timed(meshshard.graph, "save_parts", "save")
parts = int(sys.argv[sys.argv.index("-k") + 1])
rc = meshshard.cli.main(["preprocess"] + sys.argv[1:])
total = time.perf_counter() - t_start
mem["peak"] = status("VmHWM")
mesh = read_mesh(sys.argv[1])
ei = mesh_graph(mesh)
t0 = time.perf_counter()
partition(mesh.points, parts, method="graph", edge_index=ei, seed=0)
times["metis"] = time.perf_counter() - t0
print(json.dumps({"rc": rc, "times": times, "total": total, **mem}))
"""


def _run_preprocess(vtu: Path, out: Path, parts: int) -> dict:
    """`meshshard preprocess` in a child process: its wall time, phases and peak RSS, and the baseline
    (read + edge build + METIS) timed in the same child after it."""
    cmd = [sys.executable, "-c", _PREPROCESS_CHILD, str(vtu), "-k", str(parts), "-o", str(out),
           "--features", *FEATURES, "--targets", *TARGETS, "--quiet"]
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if r["rc"] != 0:
        raise RuntimeError(f"meshshard preprocess returned {r['rc']}:\n{proc.stdout[-2000:]}")
    t = r["times"]
    r["base"] = t["read"] + t["edges"] + t["metis"]
    return r


def _mesh_array_bytes(mesh) -> int:
    return int(mesh.points.nbytes + sum(c.nbytes for c in mesh.cells.values())
               + sum(v.nbytes for v in mesh.point_data.values()))


def _write_mesh(mesh, path: Path) -> None:
    import meshio

    meshio.write(path, meshio.Mesh(mesh.points, [("triangle", mesh.cells["triangle"])], point_data=mesh.point_data),
                 binary=True, compression=None)


def _rank(rank, world, data_dir, cfg):
    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.datasets import ShardedMeshDataset
    from meshshard.models import MeshGraphNet

    torch.set_num_threads(max(1, cfg["cores"] // world))
    ds = ShardedMeshDataset(data_dir, dtype=torch.float32)
    s = ds[0]
    g = s.graph
    x, e, y = ds.model_inputs(s)
    torch.manual_seed(0)
    net = MeshGraphNet(ds.num_node_features, ds.num_edge_features, ds.num_targets, hidden=cfg["hidden"],
                       num_layers=cfg["layers"], checkpoint=True)
    model = ms.DomainParallel(net, g)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    halo = _Timer()
    g.exchange = _timed_exchange(g.exchange, halo)

    def ms_step():
        opt.zero_grad(set_to_none=True)
        F.mse_loss(model(x, g, e), y).backward()
        opt.step()

    steps = {"meshshard": ms_step}
    out = dict(rank=rank, owned=g.num_owned, ghost=g.num_ghost)
    if world == 1:  # the plain baseline, on the same local graph and inputs
        plain = PlainMeshGraphNet(ds.num_node_features, ds.num_edge_features, ds.num_targets, cfg["hidden"],
                                  cfg["layers"])
        plain.load_state_dict(net.state_dict())
        popt = torch.optim.Adam(plain.parameters(), lr=1e-4)
        xl, yl = x.to_local(), y.to_local()
        with torch.no_grad():
            ref = plain(xl, g.edge_index, e)
            diff = float((model(x, g, e).to_local() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        if not diff <= 1e-5:
            raise AssertionError(f"the plain PyTorch MeshGraphNet differs from meshshard's: relative {diff:.3e}")
        out["check"] = diff

        def plain_step():
            popt.zero_grad(set_to_none=True)
            F.mse_loss(plain(xl, g.edge_index, e), yl).backward()
            popt.step()

        steps["plain"] = plain_step
    for step in steps.values():
        for _ in range(cfg["warmup"]):
            step()
    seconds = {k: 0.0 for k in steps}
    peak = {k: 0 for k in steps}
    halo.seconds = 0.0
    for _ in range(cfg["steps"]):
        for name, step in steps.items():  # alternate, so both kinds see the same load
            gc.collect()
            malloc_trim()
            ms.distributed.barrier()
            rss0 = rss_kb()
            hwm_ok = reset_hwm()
            t0 = time.perf_counter()
            step()
            seconds[name] += time.perf_counter() - t0
            peak[name] = max(peak[name], (hwm_kb() - rss0) * 1024 if hwm_ok else float("nan"))
    out.update(seconds={k: v / cfg["steps"] for k, v in seconds.items()}, peak=peak,
               halo=halo.seconds / cfg["steps"])
    return out


def _write_pieces(mesh, path: Path, pieces: int) -> None:
    """``mesh`` (triangles) as a ``.pvtu`` of ``pieces`` slabs along x, equal cell counts."""
    import numpy as np

    from meshshard.io.pieces import write_piece, write_pvtu

    tri = mesh.cells["triangle"]
    order = np.argsort(mesh.points[tri].mean(axis=1)[:, 0], kind="stable")
    names = []
    for k, idx in enumerate(np.array_split(order, pieces)):
        used, local = np.unique(tri[idx], return_inverse=True)
        pd = {name: v[used] for name, v in mesh.point_data.items()}
        name = f"{path.stem}/{path.stem}_{k}.vtu"
        write_piece(path.parent / name, mesh.points[used], np.full(len(idx), 5), np.arange(len(idx) + 1) * 3,
                    local.reshape(-1), pd)
        names.append(name)
    write_pvtu(path, names, pd)


def _pieces_work(pvtu: str, world: int):
    """A piece-wise read at P = world, or at world 1 the one-process path; (owned, ghosts)."""
    if world > 1:
        from meshshard.ops.pieces import read_pieces_distributed

        pg = read_pieces_distributed(pvtu)
        return pg.graph.num_owned, pg.graph.num_ghost
    from meshshard.graph.halo import build_all_parts
    from meshshard.io import read_mesh
    from meshshard.partitioners import partition

    mesh = read_mesh(pvtu)
    ei = mesh.edge_index()
    part = partition(mesh.points, 4, method="kdtree", refine=False)
    build_all_parts(ei, part, 1)
    return mesh.num_nodes, 0


def _pieces_rank(rank, world, pvtu, warm):
    """Peak memory and time of :func:`_pieces_work`, after a run on the small file ``warm`` (imports,
    compiled kernels: what a process holds before it reads any mesh)."""
    from meshshard._fileutil import release_free_heap

    torch.set_num_threads(1)
    _pieces_work(warm, world)
    gc.collect()
    release_free_heap(0)
    before = rss_kb()
    reset_hwm()
    t0 = time.perf_counter()
    owned, ghost = _pieces_work(pvtu, world)
    seconds = time.perf_counter() - t0
    return {"peak": (hwm_kb() - before) * 1024, "seconds": seconds, "owned": owned, "ghost": ghost}


def _pieces_section(n_target: int, tmp: Path) -> list:
    """Rows of the piece-wise read table: the one-process path, then P = 4."""
    from meshshard.datasets.synthetic import jittered_grid_mesh
    from meshshard.testing import run_distributed

    warm = tmp / "pieces_warm.pvtu"
    _write_pieces(jittered_grid_mesh(1000), warm, 8)
    mesh = jittered_grid_mesh(n_target)
    n = mesh.num_nodes
    pvtu = tmp / f"pieces_{n}.pvtu"
    _write_pieces(mesh, pvtu, 8)
    del mesh
    gc.collect()
    rows = []
    for world in (1, 4):
        res = run_distributed(_pieces_rank, world, args=(str(pvtu), str(warm)), timeout=1800)
        print(f"pieces {n:,} nodes, P={world}: {max(r['seconds'] for r in res):.1f} s", flush=True)
        rows.append((n, world, res))
    return rows


def _fmt_nodes(n: int) -> str:
    return f"{n:,}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one 2k-node mesh, 2 layers, P = 1 and 2")
    p.add_argument("--sizes", default=None, help="target node counts, comma-separated (default 500000,1000000,2000000)")
    p.add_argument("--step-nodes", type=int, default=None,
                   help="also run the step on this smaller mesh (default 10000, quick none; 0: none)")
    p.add_argument("--worlds", default=None, help="world sizes (default 1,2,4; quick 1,2)")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=None, help="processor layers (default 15, quick 2)")
    p.add_argument("--steps", type=int, default=1, help="timed steps per kind (after warm-up steps in --quick)")
    p.add_argument("--max-memory-gb", type=float, default=6.0,
                   help="memory this benchmark may use, all its processes together (default 6)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads shared by the ranks")
    p.add_argument("--pieces-nodes", default=None,
                   help="nodes of the .pvtu read piece-wise at P = 4 against one process, comma-separated (default "
                        "200000, quick 2000; 0: none)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("2000" if args.quick else "500000,1000000,2000000")).split(",")]
    step_nodes = args.step_nodes if args.step_nodes is not None else (0 if args.quick else 10000)
    worlds = [int(w) for w in (args.worlds or ("1,2" if args.quick else "1,2,4")).split(",")]
    cfg = dict(hidden=args.hidden, layers=args.layers or (2 if args.quick else 15), steps=args.steps,
               warmup=1 if args.quick else 0, cores=args.cores)
    budget = args.max_memory_gb * 2**30
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # freed tensors leave the RSS at once (ranks inherit)

    from meshshard.datasets import preprocess_dataset
    from meshshard.datasets.synthetic import jittered_grid_mesh
    from meshshard.testing import run_distributed

    print(f"MeshGraphNet hidden={cfg['hidden']} layers={cfg['layers']} float32, activation checkpointing; "
          f"{cfg['cores']} cores shared by the ranks; memory budget {args.max_memory_gb:g} GiB; "
          f"{cfg['steps']} timed step(s)", flush=True)
    pre_rows, step_rows, plain_rows, piece_rows = [], [], [], []
    pieces_nodes = [int(s) for s in (args.pieces_nodes or ("2000" if args.quick else "200000")).split(",") if int(s)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n_pieces in pieces_nodes:
            piece_rows += _pieces_section(n_pieces, tmp)
        for n_target in sizes + ([step_nodes] if step_nodes else []):
            extra = n_target == step_nodes and n_target not in sizes
            label = f"{n_target:,}" + (" (step mesh)" if extra else "")
            t0 = time.perf_counter()
            mesh = jittered_grid_mesh(n_target)
            gen_s = time.perf_counter() - t0
            n, arrays = mesh.num_nodes, _mesh_array_bytes(mesh)
            vtu = tmp / f"grid_{n}.vtu"
            _write_mesh(mesh, vtu)
            del mesh
            gc.collect()
            # Preprocess into the largest world size (timed), the smaller ones only where a step runs.
            est_pre = PREPROCESS_MULTIPLE * arrays
            data = {}
            if est_pre > budget:
                print(f"{label}: skip preprocess, estimated {est_pre / 2**30:.1f} GiB > {args.max_memory_gb:g} GiB",
                      flush=True)
                pre_rows.append((label, n, arrays, gen_s, None, est_pre))
            elif not extra:
                k = max(worlds)
                data[k] = tmp / f"data_{n}_{k}"
                r = _run_preprocess(vtu, data[k], k)
                print(f"{label}: {n:,} nodes, generated in {gen_s:.1f} s, preprocess -k {k} {r['total']:.1f} s "
                      f"(read + edges + METIS {r['base']:.1f} s), peak {r['peak'] / 2**20:.0f} MiB", flush=True)
                pre_rows.append((label, n, arrays, gen_s, r, est_pre))
            for world in worlds:
                # Activations (ghosts add a few %), plus each rank's torch and gloo resident set.
                need = estimate_step_bytes(n, cfg["hidden"], cfg["layers"], True) * 1.05 + world * PROCESS_BYTES
                if need > budget or est_pre > budget:
                    print(f"{label}, P={world}: skip the step, estimated {need / 2**30:.1f} GiB over all ranks "
                          f"> {args.max_memory_gb:g} GiB", flush=True)
                    step_rows.append((label, world, None, need))
                    continue
                if world not in data:  # untimed: in this process, saving a child's start-up
                    data[world] = tmp / f"data_{n}_{world}"
                    preprocess_dataset(str(vtu), data[world], world, FEATURES, TARGETS, progress=False)
                t1 = time.perf_counter()
                res = run_distributed(_rank, world, args=(str(data[world]), cfg), timeout=3600)
                print(f"{label}, P={world}: done in {time.perf_counter() - t1:.1f} s", flush=True)
                step_rows.append((label, world, res, need))
                if world == 1:
                    plain_rows.append((label, res[0]))

    print()
    print("`meshshard preprocess` (one partition into the largest P), in a child process: seconds from its start "
          "(imports) to the end of the command; base = read + edge build + METIS into the same parts, timed in the "
          "same child after the command; peak = the child's peak RSS during the command, imports included, and "
          "above the RSS once imports were done, as multiples of the mesh arrays (targets: total / base <= 2, "
          "peak / mesh arrays <= 6).")
    print()
    print("| nodes | mesh arrays | imports | read | edges | partition | save | other | total | per node | base "
          "| total / base | peak memory | / mesh arrays | above imports / mesh arrays |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for label, n, arrays, gen_s, r, est in pre_rows:
        if r is None:
            print(f"| {label} | {arrays / 2**20:.1f} MiB | skipped: estimated {est / 2**30:.1f} GiB "
                  "| | | | | | | | | | | | |")
            continue
        t, sec, peak = r["times"], r["total"], r["peak"]
        other = sec - r["t_imports"] - t["read"] - t["edges"] - t["partition"] - t["save"]
        print(f"| {label} | {arrays / 2**20:.1f} MiB | {r['t_imports']:.1f} | {t['read']:.1f} | {t['edges']:.1f} "
              f"| {t['partition']:.1f} | {t['save']:.1f} | {other:.1f} | {sec:.1f} s | {sec / n * 1e6:.1f} us "
              f"| {r['base']:.3g} s | {sec / r['base']:.2f} | {peak / 2**20:.0f} MiB | {peak / arrays:.1f} "
              f"| {(peak - r['rss_before']) / arrays:.1f} |")
    print()
    print("Training step (worst rank):")
    print()
    print("| nodes | P | largest shard | ghosts | peak step memory | / P=1 | target 1/P+0.05 | s / step | halo exchange |")
    print("|---|---|---|---|---|---|---|---|---|")
    base = {}
    for label, world, res, need in step_rows:
        if res is None:
            print(f"| {label} | {world} | skipped: estimated {need / 2**30:.1f} GiB | | | | | | |")
            continue
        peak = max(r["peak"]["meshshard"] for r in res)
        sec = max(r["seconds"]["meshshard"] for r in res)
        base.setdefault(label, peak if world == 1 else math.nan)
        halo = max(r["halo"] / r["seconds"]["meshshard"] for r in res)
        print(f"| {label} | {world} | {max(r['owned'] for r in res):,} | {max(r['ghost'] for r in res):,} | "
              f"{peak / 2**20:.0f} MiB | {peak / base[label]:.3f} | {1 / world + 0.05:.3f} | {sec:.2f} | {halo:.1%} |")
    if piece_rows:
        print()
        print("A .pvtu in 8 pieces read piece-wise (read + numbering + partition + halo) at P = 4, against one "
              "process reading the merged file, building its graph, a 4-part partition and every part's halo "
              "(worst rank):")
        print()
        print("| nodes | P | largest share | ghosts | peak memory | / one process | target 1/P+0.1 | seconds |")
        print("|---|---|---|---|---|---|---|---|")
        one = {}
        for n, world, res in piece_rows:
            peak = max(r["peak"] for r in res)
            one.setdefault(n, peak)
            target = f"{1 / world + 0.1:.3f}" if world > 1 else ""
            print(f"| {n:,} | {world} | {max(r['owned'] for r in res):,} | {max(r['ghost'] for r in res):,} | "
                  f"{peak / 2**20:.0f} MiB | {peak / one[n]:.3f} | {target} | {max(r['seconds'] for r in res):.1f} |")
    print()
    print("P = 1: meshshard against plain PyTorch (same weights, same output; steps alternate):")
    print()
    print("| nodes | output difference | meshshard s / step | plain s / step | meshshard / plain | target | "
          "peak memory meshshard / plain |")
    print("|---|---|---|---|---|---|---|")
    for label, r in plain_rows:
        sec, peak = r["seconds"], r["peak"]
        print(f"| {label} | {r['check']:.1e} | {sec['meshshard']:.2f} | {sec['plain']:.2f} | "
              f"{sec['meshshard'] / sec['plain']:.3f} | 1.1 | {peak['meshshard'] / peak['plain']:.3f} |")
    return 0


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
