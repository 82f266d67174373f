"""``meshshard demo``: partition a real CFD mesh, train MeshGraphNet on 2 ranks and on 1, compare.

With no arguments it takes the cylinder-in-cross-flow CFD solution (``cylinder_crossflow_re35.vtu``
from ``$MESHSHARD_DATA`` or ``../shared/data`` beside the checkout), or, when that file is absent,
meshes a cylinder channel with gmsh and puts an analytic potential flow on it. It learns pressure
from velocity, sharded over 2 local gloo processes and in 1 process with the same initial weights,
prints both loss curves side by side with their largest difference, and writes the partition plot.
The sharded run wraps the model in ``DomainParallel`` (its backward hooks sum the gradients over
ranks); both runs take their steps with :func:`meshshard.models.train_step`. Last, the trained
weights (the single-process model's, equal to the sharded one's) predict pressure on the whole
mesh: ``OUT/prediction.vtu`` holds ``pressure_pred`` and ``pressure_error`` (prediction - truth),
named as ``meshshard predict`` names them, and ``OUT/prediction.png`` draws truth, prediction and
error side by side.
"""
from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

HELP = "partition a real CFD mesh, train MeshGraphNet sharded (2 processes) vs. single-process, compare"

__all__ = ["HELP", "add_arguments", "run", "find_cfd_file", "DATA_FILE", "PRESETS"]

DATA_FILE = "cylinder_crossflow_re35.vtu"
FEATURES = ["velocity[0,1]"]
TARGETS = ["pressure"]
PRESETS = {  # small enough for a laptop's CPU: the demo shows agreement, not accuracy
    "full": dict(hidden=32, layers=4, steps=20),
    "quick": dict(hidden=16, layers=2, steps=5),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("--quick", action="store_true", help="smaller model and fewer steps (a smoke test)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default 20, quick 5)")
    parser.add_argument("--hidden", type=int, default=None, help="MeshGraphNet width (default 32, quick 16)")
    parser.add_argument("--layers", type=int, default=None, help="processor blocks (default 4, quick 2)")
    parser.add_argument("--ranks", type=int, default=2, help="processes for the sharded run (default 2)")
    from meshshard.cli._mesh_cmd import METHODS  # every registered partitioner, as `partition -m` offers

    parser.add_argument("--method", default="kdtree", choices=METHODS, help="partitioner (default kdtree)")
    parser.add_argument("--lr", type=float, default=5e-4, help="Adam learning rate (default 5e-4)")
    parser.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                        help="float64 (default) shows agreement to ~1e-12; float32 to its rounding, which "
                             "Adam amplifies over many steps")
    parser.add_argument("--data", default=None, help="mesh file with velocity and pressure point fields")
    parser.add_argument("--synthetic", action="store_true", help="use the gmsh cylinder channel even if the CFD file exists")
    parser.add_argument("-o", "--out", default="meshshard_demo",
                        help="output folder (default: meshshard_demo in the current folder; nothing is written elsewhere)")


def find_cfd_file(env: str | None = None, package_file: str | os.PathLike | None = None,
                  cwd: str | os.PathLike | None = None) -> Path | None:
    """Where the demo's CFD file is, or ``None`` (then the demo meshes one with gmsh).

    Looked for, in order:

    1. ``$MESHSHARD_DATA``: the file itself, or ``$MESHSHARD_DATA/cylinder_crossflow_re35.vtu``;
    2. ``shared/data/`` beside the checkout the package was imported from (a clone or an editable
       install: ``<clone>/../shared/data``);
    3. ``../shared/data/`` and ``./shared/data/`` from the working directory (a package installed
       into site-packages from a clone, run from the clone's root).

    Args:
        env: the value of ``MESHSHARD_DATA`` (default: read from the environment).
        package_file: this module's file (default ``__file__``; tests point it elsewhere).
        cwd: the working directory (default ``Path.cwd()``).

    Returns:
        the file's path, or ``None`` when none of the places has it.
    """
    env = os.environ.get("MESHSHARD_DATA") if env is None else env
    package_file = Path(package_file if package_file is not None else __file__).resolve()
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    cands = []
    if env:
        p = Path(env)
        cands += [p] if p.is_file() else [p / DATA_FILE]
    if len(package_file.parents) > 3:  # <checkout>/meshshard/cli/demo.py -> <checkout>/../shared/data
        cands.append(package_file.parents[3] / "shared" / "data" / DATA_FILE)
    cands += [cwd.parent / "shared" / "data" / DATA_FILE, cwd / "shared" / "data" / DATA_FILE]
    for c in cands:
        if c.is_file():
            return c
    return None


def _write_synthetic(out: Path, num_nodes: int) -> Path:
    from meshshard.datasets.synthetic import cylinder_channel_mesh

    from meshshard.io import write_vtu

    return write_vtu(out / "cylinder_potential_flow.vtu", cylinder_channel_mesh(num_nodes))


def _predict_and_write(model, x, e, edge_index, stats, mesh, src: Path, path: Path) -> dict:
    """Predict the targets on the whole mesh (read from ``src``) and write them as ``meshshard predict``
    does; returns the relative L2 error per target column."""
    import torch

    from meshshard.io import field_columns, write_prediction

    model.eval()
    with torch.no_grad():
        pred = stats.y.denormalize(model(x, edge_index, e))
    metrics = write_prediction(path, mesh, pred, TARGETS, field_columns(mesh, TARGETS), source=src)
    return {c: m["rel_l2"] for c, m in metrics.items()}


def _train(model, x, e, y, steps, lr, edge_index=None, graph=None):
    import torch

    from meshshard.models import train_step

    opt = torch.optim.Adam(model.parameters(), lr=lr)
    return [train_step(model, opt, x, e, y, edge_index=edge_index, graph=graph) for _ in range(steps)]


def _make_model(n_in, e_in, n_out, cfg):
    import torch

    from meshshard.models import MeshGraphNet

    torch.manual_seed(cfg["seed"])
    return MeshGraphNet(n_in, e_in, n_out, hidden=cfg["hidden"], num_layers=cfg["layers"]).to(getattr(torch, cfg["dtype"]))


def _sharded_rank(rank, world_size, root, cfg):
    """One rank of the sharded run: read only this rank's part, train, return the loss curve."""
    import time as _time

    from meshshard.ops import DomainParallel
    from meshshard.datasets import ShardedMeshDataset

    import torch

    ds = ShardedMeshDataset(root, dtype=getattr(torch, cfg["dtype"]))
    sample = ds[0]
    x, e, y = ds.model_inputs(sample)
    model = _make_model(x.shape[1], e.shape[1], y.shape[1], cfg)
    model.broadcast_parameters(0)
    # The hooks of DomainParallel sum the gradients over ranks: train_step needs no all-reduce.
    model = DomainParallel(model)
    t0 = _time.perf_counter()
    losses = _train(model, x, e, y, cfg["steps"], cfg["lr"], graph=sample.graph)
    return {"losses": losses, "seconds": _time.perf_counter() - t0, "owned": sample.graph.num_owned,
            "ghost": sample.graph.num_ghost}


def run(args: argparse.Namespace) -> int:
    """Partition, train on 1 process and on ``--ranks`` processes, print both loss curves, plot.

    Args:
        args: the parsed options.

    Returns:
        the exit status (0).
    """
    import torch

    from meshshard.datasets import MeshDataset, preprocess_dataset, read_dataset_meta
    from meshshard.testing import run_distributed

    t_start = time.perf_counter()
    cfg = dict(PRESETS["quick" if args.quick else "full"])
    for k in ("steps", "hidden", "layers"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    if cfg["steps"] < 1 or cfg["hidden"] < 1 or cfg["layers"] < 0 or args.ranks < 1:
        raise ValueError("--steps, --hidden and --ranks must be >= 1, --layers >= 0")
    cfg.update(lr=args.lr, seed=0, dtype=args.dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    src = Path(args.data) if args.data else (None if args.synthetic else find_cfd_file())
    if args.data and not src.is_file():
        raise FileNotFoundError(f"{src}: no such file")
    if src is None:
        print(f"{DATA_FILE} not found (set MESHSHARD_DATA); meshing a cylinder channel with gmsh and "
              "putting an analytic potential flow on it")
        src = _write_synthetic(out, 6000 if args.quick else 15000)
        what = "gmsh cylinder channel, analytic potential flow"
    else:
        what = "CFD solution" if src.name == DATA_FILE else "mesh file"
    print(f"data: {src} ({what})")

    # 1. Partition and write shards: each rank will read only its own part.
    root = out / "data"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        preprocess_dataset([src], root, args.ranks, FEATURES, TARGETS, method=args.method, halo_hops=1,
                           dtype=args.dtype, progress=not args.quiet)
    for w in caught:  # the demo's own file has no boundary markers: say so in one line, no traceback
        if "no boundary information" in str(w.message):
            print("node types: the file has no boundary markers, so every node is typed interior "
                  "(`meshshard preprocess --node-type FIELD` takes them from a field)")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    meta = read_dataset_meta(root)
    sample_dir = root / meta["samples"][0]["dir"]
    from meshshard.graph import read_meta

    q = read_meta(sample_dir).get("quality") or {}
    print(f"mesh: {meta['samples'][0]['num_nodes']} nodes, {meta['samples'][0]['num_edges']} directed edges; "
          f"partition: {args.method} into {args.ranks} parts, sizes {read_meta(sample_dir)['sizes']}"
          + (f", edge cut {q.get('edge_cut')}" if q else ""))
    print(f"task: predict {TARGETS} from {FEATURES} (+ node type); MeshGraphNet hidden={cfg['hidden']}, "
          f"layers={cfg['layers']}, Adam lr={cfg['lr']}, {cfg['steps']} steps, {args.dtype}")

    # 2. Single process on the whole mesh, same statistics and initial weights.
    ds = MeshDataset([src], FEATURES, TARGETS, stats=root / "meta.json", dtype=getattr(torch, args.dtype))
    data = ds[0]
    x, e, y = ds.model_inputs(data)
    model = _make_model(x.shape[1], e.shape[1], y.shape[1], cfg)
    t0 = time.perf_counter()
    single = _train(model, x, e, y, cfg["steps"], cfg["lr"], edge_index=data.edge_index)
    t_single = time.perf_counter() - t0

    # 3. Sharded over local gloo processes.
    ranks = run_distributed(_sharded_rank, args.ranks, args=(str(root), cfg), timeout=600)
    sharded = ranks[0]["losses"]
    for r in ranks[1:]:
        if r["losses"] != sharded:
            raise RuntimeError("ranks report different losses: the global loss is not replicated")

    print()
    print(f"{'step':>4}  {'1 process':>14}  {f'{args.ranks} processes':>14}  {'|difference|':>12}")
    diffs = []
    for i, (a, b) in enumerate(zip(single, sharded)):
        diffs.append(abs(a - b))
        print(f"{i:>4}  {a:>14.8f}  {b:>14.8f}  {diffs[-1]:>12.3e}")
    rel = max(d / max(abs(a), 1e-30) for d, a in zip(diffs, single))
    print(f"largest loss difference: {max(diffs):.3e} (relative {rel:.3e}): {args.dtype} rounding, since sums "
          "over edges and ranks are taken in a different order")
    print("per rank: " + ", ".join(f"rank {i}: {r['owned']} owned + {r['ghost']} ghost nodes, {r['seconds']:.1f} s"
                                   for i, r in enumerate(ranks)) + f"; 1 process: {t_single:.1f} s")

    # 4. The trained model's prediction on the whole mesh.
    from meshshard.io import read_mesh
    from meshshard.viz import prediction_field_names

    mesh = read_mesh(src)
    vtu = out / "prediction.vtu"
    rel = _predict_and_write(model, x, e, data.edge_index, ds.stats, mesh, src, vtu)
    fields = ", ".join(name for t in TARGETS for name in prediction_field_names(t))
    print(f"prediction: {vtu} ({fields}; relative L2 error "
          + ", ".join(f"{t} {r:.3g}" for t, r in rel.items()) + ")")

    # 5. The partition plot and the prediction plot.
    try:
        import matplotlib

        matplotlib.use("Agg")
        from meshshard.partitioners import Partition
        from meshshard.viz import plot_field_comparison, plot_partition_summary

        part = Partition.load(sample_dir / "partition.pt")
        png = out / "partition.png"
        plot_partition_summary(mesh, part, edge_index=data.edge_index, quality=q or None, path=png,
                               title=f"{src.name}: {args.method} partition into {args.ranks} parts")
        print(f"partition plot: {png}")
        prediction = read_mesh(vtu)
        png = out / "prediction.png"
        target = TARGETS[0]
        plot_field_comparison(prediction, target, *prediction_field_names(target), path=png,
                              title=f"{src.name}: {target} predicted by MeshGraphNet after {cfg['steps']} steps")
        print(f"prediction plot: {png}")
    except ImportError as exc:  # viz is optional for the comparison itself
        print(f"(no plots: {exc})")
    print(f"done in {time.perf_counter() - t_start:.1f} s; shards in {root}")
    return 0
