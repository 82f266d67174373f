"""``meshshard preprocess``: a dataset of meshes with point fields -> sharded training data; with
``--state``, trajectories (time steps of one mesh) -> a sharded trajectory dataset
(:func:`meshshard.datasets.preprocess_trajectories`)."""
from __future__ import annotations

import argparse

from meshshard.cli._mesh_cmd import METHODS, add_nodes_argument
from meshshard.io.graph import DEFAULT_KNN

HELP = ("turn a dataset of meshes with fields into sharded training data (one shard folder per sample); with "
        "--state, trajectories (CASE.pvd, XDMF series, step-file folders, MeshGraphNets datasets) into a "
        "trajectory dataset for learned simulators")

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="mesh files (any meshio format) or one folder of them; with --state, trajectories: "
                             "CASE.pvd, .xdmf time series, folders of numbered step files, MeshGraphNets folders")
    parser.add_argument("-k", "--num-parts", type=int, required=True,
                        help="parts per sample (best: the training ranks; other rank counts merge or split them on load)")
    parser.add_argument("-m", "--method", default="kdtree", choices=METHODS,
                        help="partitioner, as `meshshard partition -m` takes them (default: kdtree)")
    parser.add_argument("-o", "--out", required=True, help="output folder")
    parser.add_argument("--features", nargs="*", default=[], metavar="F",
                        help="point fields (cell fields with --nodes cells) for the node inputs x: NAME (all "
                        "components), NAME[i,j], or pos")
    parser.add_argument("--targets", nargs="*", default=[], metavar="T",
                        help="point fields (cell fields with --nodes cells) for the targets y")
    parser.add_argument("--halo-hops", type=int, default=1,
                        help="halo depth per part; >= the model's layers lets it exchange once (default 1)")
    parser.add_argument("--workers", type=int, default=1, help="files processed in parallel (processes)")
    parser.add_argument("--seed", type=int, default=0, help="partitioner seed")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="feature storage dtype")
    parser.add_argument("--knn", type=int, default=DEFAULT_KNN, metavar="K",
                        help=f"neighbours per point for point clouds (files without cells, e.g. .npz) (default {DEFAULT_KNN})")
    parser.add_argument("--node-type", default=None, metavar="FIELD",
                        help="integer node types from this point or cell field (as the MeshGraphNets datasets store "
                             "them) instead of the files' boundary markers / physical groups / patches; with "
                             "--state, the static field of node type codes")
    parser.add_argument("--state", nargs="+", default=None, metavar="S",
                        help="trajectories: the point fields that evolve (model inputs at step t, their change to "
                             "t + 1 the targets), e.g. --state velocity pressure; --features are then static fields")
    parser.add_argument("--split", default="train",
                        help="with --state: the split of a MeshGraphNets dataset to read (default train)")
    add_nodes_argument(parser, extra="Training and `meshshard predict` then use the same nodes")


def run(args: argparse.Namespace) -> int:
    """Preprocess, then print what was written / skipped and the dataset statistics.

    Args:
        args: the parsed options.

    Returns:
        the exit status.
    """
    if args.state is not None:
        return _run_trajectories(args)
    _refuse_trajectories(args.inputs)
    from meshshard.datasets import preprocess_dataset

    inputs = args.inputs[0] if len(args.inputs) == 1 else args.inputs
    res = preprocess_dataset(inputs, args.out, args.num_parts, args.features, args.targets, method=args.method,
                             halo_hops=args.halo_hops, workers=args.workers, seed=args.seed, dtype=args.dtype,
                             progress=not args.quiet, knn=args.knn,
                             node_type_field=args.node_type, nodes=args.nodes)
    n = len(res.written) + len(res.skipped)
    print(f"{n} samples in {res.out_dir}: {len(res.written)} written, {len(res.skipped)} already done "
          f"(verified, skipped), {res.seconds:.1f} s")
    s = res.stats
    print(f"statistics over {s.x.count} nodes / {s.edge_attr.count} edges: "
          f"x mean {[round(v, 4) for v in s.x.mean.tolist()]} std {[round(v, 4) for v in s.x.std.tolist()]}; "
          f"y mean {[round(v, 4) for v in s.y.mean.tolist()]} std {[round(v, 4) for v in s.y.std.tolist()]}")
    return 0


_TRAJECTORY_SUFFIXES = (".pvd", ".xdmf", ".xmf", ".tfrecord")


def _refuse_trajectories(inputs) -> None:
    """A trajectory given without --state: say what to add instead of failing on its format."""
    from pathlib import Path

    from meshshard.io.meshgraphnets import is_meshgraphnets_dir

    for inp in inputs:
        p = Path(inp)
        if p.suffix.lower() in _TRAJECTORY_SUFFIXES or (p.is_dir() and (is_meshgraphnets_dir(p)
                                                                      or any(p.glob("*.pvd")))):
            raise ValueError(f"{inp} is a trajectory (time steps of one mesh): name the fields that evolve with "
                             "--state (e.g. --state velocity pressure) to preprocess it for a learned simulator")


def _run_trajectories(args: argparse.Namespace) -> int:
    """``--state``: :func:`meshshard.datasets.preprocess_trajectories` on every input."""
    from meshshard.datasets import preprocess_trajectories

    if args.targets:
        raise ValueError("--targets does not apply to trajectories: with --state the targets are the state's change "
                         "to the next step")
    if args.workers != 1:
        raise ValueError("--workers does not apply to trajectories (they are processed one after the other)")
    if args.knn != DEFAULT_KNN:
        raise ValueError(f"--knn does not apply to trajectories (point clouds get {DEFAULT_KNN} neighbours)")
    res = preprocess_trajectories(args.inputs, args.out, args.num_parts, state=args.state, features=args.features,
                                  node_type=args.node_type, split=args.split, method=args.method,
                                  halo_hops=args.halo_hops, seed=args.seed, dtype=args.dtype)
    n = len(res.written) + len(res.skipped)
    print(f"{n} trajectories in {res.out_dir}: {len(res.written)} written, {len(res.skipped)} already done "
          f"(verified, skipped)")
    st, inc = res.stats["state"], res.stats["increment"]
    print(f"statistics over {st.count} node-steps: state mean {[round(v, 4) for v in st.mean.tolist()]} std "
          f"{[round(v, 4) for v in st.std.tolist()]}; increment mean {[round(v, 6) for v in inc.mean.tolist()]} std "
          f"{[round(v, 6) for v in inc.std.tolist()]}")
    return 0
