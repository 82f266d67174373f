"""Partition a CFD mesh with the four partitioners, compare their quality, and plot them.

    python examples/partition_cfd_mesh.py                       # the cylinder cross-flow solution
    python examples/partition_cfd_mesh.py ../shared/data/rae2822_turb.su2 -k 8 --out rae.png

Prints one row per method: edge cut (directed edges whose ends lie in different parts), load
imbalance (largest part / mean), ghost nodes, communication volume per halo exchange, the most
neighbouring parts of any part, and the time taken; then draws the four partitions side by side.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DEFAULT = Path(os.environ.get("MESHSHARD_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
METHODS = ["kdtree", "morton", "hilbert", "graph"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mesh", nargs="?", default=str(DEFAULT / "cylinder_crossflow_re35.vtu"),
                   help="mesh file (any meshio format)")
    p.add_argument("-k", "--num-parts", type=int, default=4)
    p.add_argument("--out", default="partition_comparison.png", help="figure path")
    args = p.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import meshshard as ms
    from meshshard.viz import plot_partition

    mesh = ms.read_mesh(args.mesh)
    ei = mesh.edge_index()
    print(f"{Path(args.mesh).name}: {mesh.num_nodes} nodes, {ei.shape[1]} directed edges, {args.num_parts} parts")
    cols = ["edge_cut", "imbalance", "ghost_nodes", "ghost_fraction", "comm_volume", "max_neighbor_ranks"]
    print(f"{'method':<8} " + " ".join(f"{c:>18}" for c in cols) + f" {'seconds':>8}")
    parts = {}
    for method in METHODS:
        t0 = time.perf_counter()
        part = ms.partition(mesh.points, args.num_parts, method=method, edge_index=ei, seed=0)
        dt = time.perf_counter() - t0
        q = ms.partition_quality(part, ei)
        parts[method] = part
        cells = []
        for c in cols:
            v = q.get(c, float("nan"))
            cells.append(f"{v:>18.4f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):>18d}")
        print(f"{method:<8} " + " ".join(cells) + f" {dt:>8.3f}")

    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    for ax, method in zip(axes.ravel(), METHODS):
        plot_partition(mesh, parts[method], edge_index=ei, show_ghosts=True, ax=ax, title=method)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
