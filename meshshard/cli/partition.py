"""``meshshard partition``: split a mesh or point cloud into shards and write them to a folder."""
from __future__ import annotations

import argparse
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from meshshard._fileutil import atomic_dir, read_json_dict, release_free_heap
from meshshard.cli._mesh_cmd import (METHODS, add_nodes_argument, format_quality, format_table, load_mesh_and_graph,
                                     progress, run_partition)
from meshshard.io.graph import DEFAULT_KNN
from meshshard.datasets.preprocess import DATASET_FORMAT
from meshshard.io import is_reader_field

HELP = "split a mesh or point cloud into shards and write them (format: docs/format.md)"

__all__ = ["HELP", "add_arguments", "run", "check_shard_dir"]

_SHARD_FILE = re.compile(r"^(meta\.json|partition\.pt|part_\d{4,}\.pt)$")


def check_shard_dir(out: Path) -> None:
    """Refuse an output folder that holds something other than a shard folder.

    Accepted: a missing or empty folder, or one written by ``meshshard partition`` before (it is
    overwritten). Refused: a file, a preprocessed dataset (``meshshard preprocess``), a folder
    with other files.

    Args:
        out: the ``-o`` folder.

    Raises:
        ValueError: naming what is there.
    """
    if not out.exists():
        return
    if not out.is_dir():
        raise ValueError(f"-o {out} exists and is not a folder")
    meta = out / "meta.json"
    if meta.exists():
        d = read_json_dict(meta) or {}
        if d.get("format") == DATASET_FORMAT:
            raise ValueError(f"-o {out} holds a dataset written by `meshshard preprocess`, a different format; "
                             "choose another output folder")
        if not ("num_parts" in d and "files" in d):
            raise ValueError(f"-o {out} holds a meta.json that is not a meshshard shard folder's; "
                             "choose another output folder")
    other = sorted(p.name for p in out.iterdir() if not p.name.startswith(".") and not _SHARD_FILE.match(p.name))
    if other:
        shown = ", ".join(other[:5]) + (", ..." if len(other) > 5 else "")
        raise ValueError(f"-o {out} exists and holds files that are not shards ({shown}); choose another "
                         "output folder (or an empty one)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("mesh", metavar="MESH", help="mesh file (.su2 .vtu .vtk .msh ...) or point cloud (.npz with "
                        "'points', .npy)")
    parser.add_argument("-k", "--num-parts", type=int, required=True, metavar="N", help="number of shards")
    parser.add_argument("-m", "--method", choices=METHODS, default="kdtree",
                        help="partitioner: k-d tree (recursive coordinate bisection), inertial (recursive "
                             "inertial bisection), Morton or Hilbert curve, or graph (METIS) (default: kdtree)")
    parser.add_argument("-o", "--out", required=True, metavar="OUT", help="output folder for meta.json, "
                        "partition.pt and part_XXXX.pt")
    parser.add_argument("--halo-hops", type=int, default=1, metavar="H", help="ghost-node rings stored per part "
                        "(default: 1)")
    parser.add_argument("--no-refine", action="store_true", help="skip the boundary refinement that lowers the "
                        "edge cut of geometric partitions")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default: 0)")
    parser.add_argument("--knn", type=int, default=DEFAULT_KNN, metavar="K", help="neighbours per point for point "
                        f"clouds, which have no cells (default: {DEFAULT_KNN})")
    add_nodes_argument(parser, extra="With cells the part files hold the cell fields and meta.json says "
                       '"nodes": "cells"')


def run(args: argparse.Namespace) -> int:
    """Read, partition, write the shard folder, print the sizes and quality report.

    Args:
        args: the parsed options.

    Returns:
        the exit status.
    """
    from meshshard._fileutil import sha256_file
    from meshshard.graph import read_meta, save_parts

    if args.halo_hops < 1:
        raise ValueError(f"--halo-hops must be >= 1, got {args.halo_hops}")
    src = Path(args.mesh)
    out = Path(args.out)
    check_shard_dir(out)
    t0 = time.perf_counter()
    # the source file's checksum is read beside the reader (hashlib releases the GIL while it hashes)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="meshshard-sha256") as background:
        hashing = background.submit(sha256_file, src)
        with progress(3, "meshshard partition", not args.quiet) as bar:
            mesh, edge_index, graph_info = load_mesh_and_graph(src, args.knn, bar, nodes=args.nodes)
            mesh.cells.clear()  # the graph is built: free the element arrays before METIS and the part files
            mesh.polyhedra = None
            mesh.vertex_mesh = None  # (cell-centred: the mesh the cells came from)
            release_free_heap()
            part = run_partition(mesh, edge_index, args.num_parts, args.method, args.seed, not args.no_refine, bar)
        source_sha256 = hashing.result()
    node_data = {"pos": torch.from_numpy(mesh.points)}
    skipped = []
    for name, arr in mesh.point_data.items():
        if name == "pos" or is_reader_field(name) or not np.issubdtype(arr.dtype, np.number):
            skipped.append(name)
            continue
        node_data[name] = torch.from_numpy(np.ascontiguousarray(arr))
    meta = {
        "source": str(src.resolve()),
        "source_sha256": source_sha256,
        "source_format": src.suffix.lower(),
        "nodes": args.nodes,
        "seed": args.seed,
        "refine": not args.no_refine,
        "node_sets": {k: int(v.numel()) for k, v in mesh.node_sets.items()},
        "command": "meshshard partition " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["partition"] else None,
        **graph_info,
    }
    # built beside OUT and swapped in whole: an interrupted or failed run leaves OUT as it was
    with atomic_dir(out) as tmp:
        save_parts(tmp, edge_index, part, node_data=node_data, halo_hops=args.halo_hops, meta=meta,
                   progress=not args.quiet)
    info = read_meta(out)
    elapsed = time.perf_counter() - t0

    sizes = list(part.sizes)
    what = "cells as nodes" if args.nodes == "cells" else "nodes"
    print(f"{src.name}: {mesh.num_nodes:,} {what}, {edge_index.shape[1]:,} directed edges ({graph_info['graph']}), "
          f"dim {mesh.dim} -> {part.num_parts} parts with {args.method} in {elapsed:.1f} s")
    print(format_table(["parts", "min size", "mean size", "max size"],
                       [[part.num_parts, min(sizes), round(sum(sizes) / len(sizes), 1), max(sizes)]]))
    print()
    print(format_quality(info.get("quality")))
    if skipped:
        print(f"note: {'cell' if args.nodes == 'cells' else 'point'} data not stored (a reader's own bookkeeping, non-numeric, or the reserved name pos): "
              f"{', '.join(skipped)}")
    print(f"\nwrote {out}/ (meta.json, partition.pt, {part.num_parts} part files)")
    return 0
