"""``meshshard preprocess``: a dataset of meshes with point fields -> sharded training data."""
from __future__ import annotations

import argparse

from meshshard.cli._mesh_cmd import METHODS, add_nodes_argument
from meshshard.io.graph import DEFAULT_KNN

HELP = "turn a dataset of meshes with fields into sharded training data (one shard folder per sample)"

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="mesh files (any meshio format) or one folder of them")
    parser.add_argument("-k", "--num-parts", type=int, required=True, help="parts per sample (best: the training ranks; other rank counts merge or split them on load)")
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
                             "them) instead of the files' boundary markers / physical groups / patches")
    add_nodes_argument(parser, extra="Training and `meshshard predict` then use the same nodes")


def run(args: argparse.Namespace) -> int:
    """Preprocess, then print what was written / skipped and the dataset statistics.

    Args:
        args: the parsed options.

    Returns:
        the exit status.
    """
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
