"""The step of a learned simulator's rollout at world sizes 1, 2 and 4 (gloo, spawned local processes),
against a plain PyTorch MeshGraphNet step with the same weights, and the rollout error of the example.

    python benchmarks/bench_rollout.py --quick     # ~3k nodes, hidden 32, 4 layers; the example's --quick error
    python benchmarks/bench_rollout.py             # ~10k nodes, hidden 32, 6 layers; the example's full error
    python benchmarks/bench_rollout.py --nodes 200000 --hidden 128 --layers 15 --no-example   # paper sizes

A rollout step is what ``meshshard rollout`` runs per step
(:func:`meshshard.models.rollout_states`): the normalised inputs, MeshGraphNet, the de-normalised
increment added to the nodes that evolve and the true values set on the others (Dirichlet). The
baseline is the same step written in plain PyTorch (``index_select`` / ``index_add_`` message
passing, no PyG, no meshshard) with the same weights, timed in the same process at P = 1, the two
alternating round by round (median of the paired ratios, one step per round by default, so that a
load that changes slowly on a shared machine weighs on both; target <= 1.1). At P = 2 and 4 the
state stays sharded (each rank steps its owned rows, only halo rows move, inside the model), the
ranks share the machine's cores, and the halo share is the time spent in ``ShardedGraph.exchange``
over the step time (worst rank). Every rollout is first checked in float64 against the plain one at
P = 1 (largest difference of the state after a few steps); the timings are float32.

The second table is the RMSE per step of ``examples/learned_simulator.py`` (its ``--quick`` sizes
with ``--quick``, its defaults otherwise): a MeshGraphNet trained briefly on 2 ranks on
advection-diffusion cases, rolled out on 2 ranks from step 0 of a held-out case.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


class PlainMeshGraphNet(nn.Module):
    """MeshGraphNet in plain PyTorch, with the parameter names of :class:`meshshard.models.MeshGraphNet`
    (so ``load_state_dict`` takes its weights).

    Args:
        net: the meshshard model whose architecture (and, after ``load_state_dict``, weights) it copies.
    """

    def __init__(self, net):
        super().__init__()
        import copy

        def plain(mlp):  # the same layers as a bare nn.Sequential
            return nn.Sequential(*[copy.deepcopy(m) for m in mlp])

        self.node_encoder, self.edge_encoder, self.decoder = (plain(net.node_encoder), plain(net.edge_encoder),
                                                              plain(net.decoder))
        self.processor = nn.ModuleList(nn.ModuleDict({"edge_mlp": plain(b.edge_mlp), "node_mlp": plain(b.node_mlp)})
                                       for b in net.processor)

    def forward(self, x, edge_index, edge_attr):
        src, dst = edge_index
        h, e = self.node_encoder(x), self.edge_encoder(edge_attr)
        for block in self.processor:
            e = e + block["edge_mlp"](torch.cat([e, h.index_select(0, src), h.index_select(0, dst)], -1))
            agg = h.new_zeros((h.shape[0], e.shape[1])).index_add_(0, dst, e)
            h = h + block["node_mlp"](torch.cat([h, agg], -1))
        return self.decoder(h)


def plain_rollout(model, stats, state, node_type_one_hot, fixed, edge_index, edge_in, truth, steps):
    """``steps`` plain-PyTorch rollout steps (the baseline): normalise, model, add the increment,
    Dirichlet values on ``fixed`` rows."""
    (s_mean, s_std), (i_mean, i_std) = stats
    with torch.no_grad():
        for k in range(1, steps + 1):
            x = torch.cat([(state - s_mean) / s_std, node_type_one_hot], 1)
            pred = model(x, edge_index, edge_in)
            state = torch.where(fixed, truth(k), state + pred * i_std + i_mean)
    return state


def _spec_and_case(cfg):
    """The case (a trajectory on a jittered grid), its graph and a SimulatorSpec from its statistics."""
    from meshshard.datasets.fields import edge_features
    from meshshard.datasets.stats import FieldStats
    from meshshard.datasets.synthetic import advection_diffusion_trajectory, jittered_grid_mesh
    from meshshard.models import SimulatorSpec

    mesh = jittered_grid_mesh(cfg["nodes"], aspect=2.0, seed=0)
    traj = advection_diffusion_trajectory(mesh, steps=cfg["warmup"] + cfg["steps"] * cfg["rounds"] + 2, seed=0)
    state = torch.from_numpy(traj.fields["velocity"]).double()  # [T, N, 2]
    node_type = torch.from_numpy(traj.static["node_type"][:, 0])
    ei = mesh.edge_index()
    edge_attr = edge_features(torch.as_tensor(mesh.points, dtype=torch.float64), ei)

    def stats(t):
        return FieldStats(mean=t.mean(0), std=t.std(0, unbiased=False), count=t.shape[0])

    inc = (state[1:] - state[:-1]).reshape(-1, 2)
    spec = SimulatorSpec(state=["velocity"], state_columns=["velocity[0]", "velocity[1]"], features=[],
                         feature_columns=[], node_type="node_type", node_type_codes=[0, 1], evolving_types=[0],
                         stats={"state": stats(state.reshape(-1, 2)), "increment": stats(inc),
                                "features": FieldStats(mean=torch.zeros(0, dtype=torch.float64),
                                                       std=torch.ones(0, dtype=torch.float64)),
                                "edge_attr": stats(edge_attr)})
    return dict(points=mesh.points, edge_index=ei, edge_attr=edge_attr, state=state, node_type=node_type, spec=spec)


def _rank(rank, world, cfg, case_file, weights_file):
    import meshshard as ms
    from meshshard.graph import ShardedGraph
    from meshshard.models import MeshGraphNet, rollout_states
    from meshshard.partitioners import partition

    case = torch.load(case_file, weights_only=False)
    spec = case["spec"]
    net = MeshGraphNet(spec.num_node_inputs, spec.num_edge_features, spec.num_state, hidden=cfg["hidden"],
                       num_layers=cfg["layers"], mlp_layers=2)
    net.load_state_dict(torch.load(weights_file, weights_only=True))
    ei, truth_all, node_type = case["edge_index"], case["state"], case["node_type"]
    graph, rows, edge_attr = None, slice(None), case["edge_attr"]
    halo = [0.0]
    if world > 1:
        part = partition(case["points"], world, method="kdtree", edge_index=ei, seed=0, refine=False)
        graph = ShardedGraph.from_partition(ei, part)
        rows, edge_attr = graph.owned_ids, edge_attr[graph.edge_ids]
        exchange = graph.exchange

        def timed(*a, **k):
            t0 = time.perf_counter()
            out = exchange(*a, **k)
            halo[0] += time.perf_counter() - t0
            return out

        graph.exchange = timed
    out = {"rank": rank, "owned": int(truth_all.shape[1]) if graph is None else int(graph.num_owned),
           "ghost": 0 if graph is None else int(graph.num_ghost)}
    whole = dict(edge_index=ei) if graph is None else dict(graph=graph)

    def run(dtype, start, steps):
        net.to(dtype)
        truth = truth_all[:, rows].to(dtype)
        return rollout_states(net, spec, truth[start], torch.zeros(truth.shape[1], 0, dtype=dtype), node_type[rows],
                              edge_attr.to(dtype), lambda k: truth[start + k], steps, **whole)

    check_steps = 3
    out["check_state"] = run(torch.float64, 0, check_steps)
    out["check_ids"] = torch.arange(truth_all.shape[1]) if graph is None else graph.owned_ids
    plain = None
    if world == 1:  # the baseline, in this process: same weights, float64 check then float32 timing
        plain = PlainMeshGraphNet(net).double()
        plain.load_state_dict(net.state_dict())
        e_in = spec.edge_inputs(edge_attr)
        one_hot = spec.one_hot(node_type, torch.float64)
        fixed = ~spec.evolving(node_type)[:, None]
        st = spec.stats
        stats64 = ((st["state"].mean, st["state"]._scale()), (st["increment"].mean, st["increment"]._scale()))
        out["plain_state"] = plain_rollout(plain, stats64, truth_all[0], one_hot, fixed, ei, e_in,
                                           lambda k: truth_all[k], check_steps)
        plain.float()
        e32, oh32, t32 = e_in.float(), one_hot.float(), truth_all.float()
        stats32 = tuple((m.float(), s.float()) for m, s in stats64)

        def plain_steps(start, steps):
            return plain_rollout(plain, stats32, t32[start], oh32, fixed, ei, e32, lambda k: t32[start + k], steps)

    run(torch.float32, 0, cfg["warmup"])
    if plain is not None:
        plain_steps(0, cfg["warmup"])
    ms.distributed.barrier()
    times, plain_times, halos = [], [], []
    start = cfg["warmup"]
    for r in range(cfg["rounds"]):
        order = (0, 1) if r % 2 == 0 else (1, 0)  # alternate which goes first
        for which in order:
            if which == 1 and plain is None:
                continue
            ms.distributed.barrier()
            halo[0] = 0.0
            t0 = time.perf_counter()
            if which == 0:
                run(torch.float32, start, cfg["steps"])
                times.append((time.perf_counter() - t0) / cfg["steps"])
                halos.append(halo[0] / cfg["steps"])
            else:
                plain_steps(start, cfg["steps"])
                plain_times.append((time.perf_counter() - t0) / cfg["steps"])
        start += cfg["steps"]
    out.update(seconds=statistics.median(times), halo=statistics.median(halos))
    if plain is not None:
        out.update(plain_seconds=statistics.median(plain_times),
                   ratio=statistics.median(t / p for t, p in zip(times, plain_times)))
    return out


def _example():
    """examples/learned_simulator.py, imported by its name from its folder (so spawned ranks find its functions)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import learned_simulator

    return learned_simulator


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, and the example's --quick")
    p.add_argument("--nodes", type=int, default=None, help="mesh nodes (default 10000; quick 3000)")
    p.add_argument("--hidden", type=int, default=None, help="latent width (default 32; quick 32)")
    p.add_argument("--layers", type=int, default=None, help="processor blocks (default 6; quick 4)")
    p.add_argument("--steps", type=int, default=None, help="rollout steps per timed round (default 1)")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds, the two kinds of P = 1 step alternating (default 12; quick 6)")
    p.add_argument("--worlds", default="1,2,4")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads shared by the ranks")
    p.add_argument("--no-example", action="store_true", help="skip the example's training and rollout error")
    args = p.parse_args(argv)
    cfg = dict(nodes=3000, hidden=32, layers=4, steps=1, rounds=6) if args.quick else \
        dict(nodes=10000, hidden=32, layers=6, steps=1, rounds=12)
    for k in ("nodes", "hidden", "layers", "steps", "rounds"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    cfg["warmup"] = 2
    worlds = [int(w) for w in args.worlds.split(",")]
    if worlds[0] != 1:
        p.error("--worlds must start with 1 (the plain PyTorch baseline runs at P = 1)")

    from meshshard.models import MeshGraphNet
    from meshshard.testing import run_distributed

    t0 = time.perf_counter()
    case = _spec_and_case(cfg)
    spec = case["spec"]
    torch.manual_seed(0)
    net = MeshGraphNet(spec.num_node_inputs, spec.num_edge_features, spec.num_state, hidden=cfg["hidden"],
                       num_layers=cfg["layers"], mlp_layers=2)
    print(f"case: advection-diffusion on a jittered grid, {case['state'].shape[1]} nodes, "
          f"{case['edge_index'].shape[1]} directed edges ({time.perf_counter() - t0:.1f} s); MeshGraphNet "
          f"hidden={cfg['hidden']} layers={cfg['layers']} (random weights), float32; {cfg['rounds']} rounds of "
          f"{cfg['steps']} rollout steps after {cfg['warmup']} warm-up steps; {args.cores} cores shared by the ranks",
          flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        case_file, weights_file = Path(tmp) / "case.pt", Path(tmp) / "weights.pt"
        torch.save(case, case_file)
        torch.save(net.state_dict(), weights_file)
        for world in worlds:
            t1 = time.perf_counter()
            res = run_distributed(_rank, world, args=(cfg, str(case_file), str(weights_file)), timeout=1800,
                                  threads_per_rank=max(1, args.cores // world))
            print(f"  P={world}: done in {time.perf_counter() - t1:.1f} s", flush=True)
            rows.append((world, res))
    base = rows[0][1][0]
    n = case["state"].shape[1]
    ref = torch.empty(n, spec.num_state, dtype=torch.float64)
    ref[base["check_ids"]] = base["check_state"]
    plain_diff = float((base["check_state"] - base["plain_state"]).abs().max())
    print()
    print(f"Rollout step time against a plain PyTorch MeshGraphNet step (same weights, P = 1 ratio target <= 1.1); "
          f"float64 check after 3 steps: meshshard P = 1 vs plain PyTorch, max |difference| {plain_diff:.1e}")
    print()
    print("| P | max owned nodes | max ghosts | s/step | plain PyTorch s/step | ratio to plain | speedup vs P=1 | "
          "halo share | max diff vs P=1 (float64) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for world, res in rows:
        sec = max(r["seconds"] for r in res)
        halo = max(r["halo"] / r["seconds"] for r in res)
        diff = max(float((r["check_state"] - ref[r["check_ids"]]).abs().max()) for r in res)
        plain_s = f"{base['plain_seconds']:.4f}" if world == 1 else "-"
        ratio = f"{base['ratio']:.2f}" if world == 1 else "-"
        print(f"| {world} | {max(r['owned'] for r in res)} | {max(r['ghost'] for r in res)} | {sec:.4f} | {plain_s} | "
              f"{ratio} | {base['seconds'] / sec:.2f} | {halo:.2f} | {diff:.1e} |")
    if args.no_example:
        return 0

    example = _example()
    with tempfile.TemporaryDirectory() as tmp:
        ex_argv = ["--out", str(Path(tmp) / "demo")] + (["--quick"] if args.quick else [])
        print(f"\nrunning examples/learned_simulator.py {' '.join(ex_argv[2:])}", flush=True)
        res = example.run(example.parse_args(ex_argv))
    rmse = res["rmse"]
    fields = list(rmse)
    steps = len(rmse[fields[0]])
    picks = sorted(set(range(0, steps, max(1, steps // 8))) | {1, steps - 1})
    print()
    cmd = "python examples/learned_simulator.py" + (" --quick" if args.quick else "")
    print(f"Rollout error of `{cmd}` on its held-out case (trained {res['train_s']:.0f} s on 2 ranks, final "
          f"training loss {res['loss']:.3g}; rolled out on 2 ranks from step 0)")
    print()
    print("| step | " + " | ".join(f"RMSE {f}" for f in fields) + " |")
    print("|---" * (len(fields) + 1) + "|")
    for k in picks:
        print(f"| {k} | " + " | ".join(f"{rmse[f][k]:.3g}" for f in fields) + " |")
    return 0


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
