"""Partition a CFD mesh with the four partitioners, compare their quality, and plot them.

    python examples/partition_cfd_mesh.py                       # the cylinder cross-flow solution
    python examples/partition_cfd_mesh.py ../shared/data/rae2822_turb.su2 -k 8 --out rae.png

Prints one row per method: edge cut (undirected edges whose ends lie in different parts), load
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
    from meshshard.viz import mesh_zoom_box, plot_partition

    mesh = ms.read_mesh(args.mesh)
    ei = mesh.edge_index()
    print(f"{Path(args.mesh).name}: {mesh.num_nodes} nodes, {ei.shape[1]} directed edges, {args.num_parts} parts")
    cols = ["edge_cut", "imbalance", "ghost_nodes", "ghost_fraction", "comm_volume", "max_neighbor_ranks"]
    print(f"{'method':<8} " + " ".join(f"{c:>18}" for c in cols) + f" {'seconds':>8}")
    parts, quality = {}, {}
    for method in METHODS:
        t0 = time.perf_counter()
        part = ms.partition(mesh.points, args.num_parts, method=method, edge_index=ei, seed=0)
        dt = time.perf_counter() - t0
        q = ms.partition_quality(part, ei)
        parts[method], quality[method] = part, q
        cells = []
        for c in cols:
            v = q.get(c, float("nan"))
            cells.append(f"{v:>18.4f}" if isinstance(v, float) and not float(v).is_integer() else f"{int(v):>18d}")
        print(f"{method:<8} " + " ".join(cells) + f" {dt:>8.3f}")

    # One column per method; a second row zooms on the finest cells (e.g. an airfoil in a far field).
    box = mesh_zoom_box(mesh)
    rows = 2 if box is not None else 1
    fig, axes = plt.subplots(rows, len(METHODS), figsize=(4.5 * len(METHODS), 4.2 * rows), squeeze=False)
    for col, method in enumerate(METHODS):
        q = quality[method]
        plot_partition(mesh, parts[method], edge_index=ei, show_ghosts=True, ax=axes[0, col],
                       title=f"{method}: edge cut {int(q['edge_cut'])}, imbalance {float(q['imbalance']):.3f}\n"
                             f"{int(q['ghost_nodes'])} ghost nodes (black)")
        if box is not None:
            plot_partition(mesh, parts[method], edge_index=ei, show_ghosts=True, ax=axes[1, col], zoom=box,
                           title=f"{method}: zoom")
    fig.tight_layout()
    from meshshard._fileutil import atomic_path

    with atomic_path(args.out) as tmp:  # plain permissions, and no half-written figure if interrupted
        fig.savefig(tmp, format=Path(args.out).suffix.lstrip(".").lower() or "png", dpi=110)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
