"""``meshshard info``: sizes and quality report of a shard folder, after verifying its checksums."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from meshshard.cli._mesh_cmd import format_quality, format_table

HELP = ("show the sizes and quality report of a shard folder (meshshard partition) or a dataset "
        "(meshshard preprocess) and verify its checksums")

__all__ = ["HELP", "add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    parser.add_argument("out", metavar="OUT", help="shard folder written by `meshshard partition` or `preprocess`, "
                        "or a mesh file (its nodes, graph, fields and named sets)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    from meshshard.cli._mesh_cmd import add_nodes_argument

    add_nodes_argument(parser, default=None, extra="For a mesh file (default points); a folder's nodes are the ones "
                       "it was written with (given, they must match)")


def run(args: argparse.Namespace) -> int:
    """Verify, then print the tables; exit 1 naming every damaged file.

    Args:
        args: the parsed options.

    Returns:
        the exit status.
    """
    from tqdm import tqdm

    from meshshard.datasets import is_dataset_dir
    from meshshard.graph import load_part, read_meta, verify_parts

    out = Path(args.out)
    if out.is_file():
        return _mesh_info(out, args)
    if not out.is_dir():
        raise FileNotFoundError(f"{out} not found (expected a shard folder or dataset with meta.json, or a mesh file)")
    if is_dataset_dir(out):
        return _dataset_info(out, args)
    meta = read_meta(out)
    _check_nodes(args, meta.get("nodes", "points"), out)
    problems = verify_parts(out)
    if problems:
        for p in problems:
            print(f"meshshard info: error: {out}/{p}", file=sys.stderr)
        print(f"meshshard info: {out} is damaged ({len(problems)} problem(s)); re-run `meshshard partition`",
              file=sys.stderr)
        return 1

    rows = []
    ghost_ids = []
    for r in tqdm(range(int(meta["num_parts"])), desc="reading parts", file=sys.stderr, leave=False,
                  disable=args.quiet or args.json):
        part = load_part(out, r)
        ghost_ids.append(part["ghost_ids"])
        name = f"part_{r:04d}.pt"
        rows.append({
            "part": r,
            "owned": int(part["owned_ids"].numel()),
            "ghosts": int(part["ghost_ids"].numel()),
            "edges": int(part["edge_index"].shape[1]),
            "neighbours": int(len({int(o) for o in part["ghost_owner"].tolist()})),
            "KiB": round((out / name).stat().st_size / 1024, 1),
        })
        del part

    distinct_ghosts = int(torch.unique(torch.cat(ghost_ids)).numel()) if ghost_ids else 0
    if args.json:
        print(json.dumps({"meta": {k: v for k, v in meta.items() if k != "files"}, "parts": rows,
                          "distinct_ghosts": distinct_ghosts, "verified": True}, indent=2))
        return 0

    src = meta.get("source")
    what = "cells (cell-centred nodes)" if meta.get("nodes") == "cells" else "nodes"
    print(f"{out}: {meta['num_parts']} parts of {meta['num_nodes']:,} {what}, {meta.get('num_edges', 0):,} edges"
          f"{', dim ' + str(meta['dim']) if meta.get('dim') else ''}; method {meta.get('method') or '?'}, "
          f"halo hops {meta.get('halo_hops', '?')}, format v{meta.get('format_version')}")
    if src:
        print(f"source: {src}" + (f" (sha256 {meta['source_sha256'][:12]}...)" if meta.get("source_sha256") else ""))
    feats = meta.get("node_features") or {}
    if feats:
        print("node features: " + ", ".join(f"{k}{v.get('shape', [])}:{v.get('dtype', '?')}" for k, v in feats.items()))
    print()
    headers = ["part", "owned", "ghosts", "edges", "neighbours", "KiB"]
    print(format_table(headers, [[row[h] for h in headers] for row in rows]))
    owned = [row["owned"] for row in rows]
    mean = sum(owned) / len(owned)
    print(f"owned nodes: min {min(owned):,}  mean {mean:,.1f}  max {max(owned):,}  (max/mean {max(owned) / mean:.3f})")
    print(f"ghosts: {sum(row['ghosts'] for row in rows):,} summed over parts, {distinct_ghosts:,} distinct nodes "
          "(a node that is a ghost of two parts counts twice in the sum)")
    print()
    print(format_quality(_label_quality(meta.get("quality"))))
    print(f"\nchecksums: all {len(meta['files'])} files OK")
    return 0


def _dataset_info(out: Path, args: argparse.Namespace) -> int:
    """``info`` of a folder written by ``meshshard preprocess``: samples, parts, statistics."""
    from meshshard.datasets import read_dataset_meta, verify_dataset
    from meshshard.graph import read_meta

    meta = read_dataset_meta(out)
    _check_nodes(args, meta.get("nodes", "points"), out)
    problems = verify_dataset(out, progress=not (args.quiet or args.json))
    if problems:
        for p in problems:
            print(f"meshshard info: error: {out}/{p}", file=sys.stderr)
        print(f"meshshard info: {out} is damaged ({len(problems)} problem(s)); re-run `meshshard preprocess` "
              "with the same arguments to rewrite the damaged samples", file=sys.stderr)
        return 1
    rows = []
    for s in meta["samples"]:
        sm = read_meta(out / s["dir"])
        q = sm.get("quality") or {}
        sizes = sm["sizes"]
        rows.append({
            "sample": s["dir"],
            "nodes": sm["num_nodes"],
            "edges": sm["num_edges"],
            "min part": min(sizes),
            "max part": max(sizes),
            "edge cut": q.get("edge_cut", "?"),
            "ghosts": q.get("ghost_nodes", "?"),
            "KiB": round(sum((out / s["dir"] / f).stat().st_size for f in sm["files"]) / 1024, 1),
        })
    if args.json:
        print(json.dumps({"meta": meta, "samples": rows, "verified": True}, indent=2))
        return 0
    n_files = sum(len(s["files"]) + 1 for s in meta["samples"])
    print(f"{out}: preprocessed dataset (format v{meta['format_version']}), {meta['num_samples']} sample(s), "
          f"{meta['num_parts']} parts each; method {meta['method']}, halo hops {meta['halo_hops']}, "
          f"stored as {meta['dtype']}; nodes: mesh {meta.get('nodes', 'points')}")
    print(f"features {meta['features']} -> x columns {meta['feature_columns']}; targets {meta['targets']} -> "
          f"y columns {meta['target_columns']}; node types {['interior'] + list(meta['node_types'])}")
    print()
    headers = ["sample", "nodes", "edges", "min part", "max part", "edge cut", "ghosts", "KiB"]
    shown = [_QUALITY_LABELS["ghost_nodes"] if h == "ghosts" else h for h in headers]
    print(format_table(shown, [[row[h] for h in headers] for row in rows]))
    print()
    stat_rows = []
    for key, cols in (("x", meta["feature_columns"]), ("y", meta["target_columns"]),
                      ("edge_attr", [f"rel_{i}" for i in range(len(meta["stats"]["edge_attr"]["mean"]) - 1)] + ["norm"])):
        st = meta["stats"][key]
        for c, m, sd in zip(cols, st["mean"], st["std"]):
            stat_rows.append([f"{key}: {c}", float(m), float(sd), int(st["count"])])
    print(format_table(["statistics (whole dataset)", "mean", "std", "count"], stat_rows, align="lrrr"))
    print(f"\nchecksums: all {n_files} files of {len(rows)} sample(s) OK")
    return 0


def _check_nodes(args: argparse.Namespace, nodes: str, out: Path) -> None:
    """``--nodes`` given for a folder must be the nodes it was written with."""
    if args.nodes is not None and args.nodes != nodes:
        raise ValueError(f"--nodes {args.nodes}: {out} was written with nodes = {nodes}; drop --nodes")


def _mesh_info(path: Path, args: argparse.Namespace) -> int:
    """``info`` of a mesh file: its nodes (vertices, or cells with ``--nodes cells``), graph, fields, sets."""
    import numpy as np

    from meshshard.io import mesh_graph, mesh_graph_info, read_mesh

    nodes = args.nodes or "points"
    mesh = read_mesh(path, nodes=nodes)
    edges = mesh_graph(mesh)
    base = mesh.vertex_mesh if nodes == "cells" else mesh

    def shapes(fields):
        return {k: list(np.asarray(v).shape[1:]) for k, v in fields.items()}

    summary = {
        "source": str(path), "nodes": nodes, "num_nodes": mesh.num_nodes, "dim": mesh.dim,
        "num_edges": int(edges.shape[1]), **mesh_graph_info(mesh),
        "cells": base.cell_counts(),
        "boundary_cells": {t: len(c) for t, c in base.boundary_cells.items()},
        "node_fields": shapes(mesh.point_data),
        "cell_fields": shapes(mesh.cell_data),
        "node_sets": {k: int(v.numel()) for k, v in mesh.node_sets.items()},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    what = "cells as nodes (at their centres)" if nodes == "cells" else "nodes"
    print(f"{path}: {mesh.num_nodes:,} {what}, dim {mesh.dim}; graph {summary['graph']}, {edges.shape[1]:,} directed edges")
    if summary["cells"]:
        print("cells: " + ", ".join(f"{t} {n:,}" for t, n in summary["cells"].items())
              + ("; boundary cells: " + ", ".join(f"{t} {n:,}" for t, n in summary["boundary_cells"].items())
                 if summary["boundary_cells"] else ""))
    fields = ", ".join(f"{k}{v}" for k, v in summary["node_fields"].items()) or "none"
    print(f"node fields ({'cell' if nodes == 'cells' else 'point'} data): {fields}")
    if nodes == "points" and summary["cell_fields"]:
        print("cell fields: " + ", ".join(f"{k}{v}" for k, v in summary["cell_fields"].items())
              + " (the node fields of --nodes cells)")
    sets = ", ".join(f"{k} ({n:,})" for k, n in summary["node_sets"].items())
    print(f"named sets ({'cells' if nodes == 'cells' else 'nodes'} each): {sets or 'none (no boundary information)'}")
    return 0


# the quality report's ghost count, named apart from the per-part "ghosts" column and the distinct count
_QUALITY_LABELS = {"ghost_nodes": "ghosts (1-hop, sum over parts)"}


def _label_quality(quality):
    """The quality report with keys whose bare name is ambiguous relabelled for printing."""
    if not quality:
        return quality
    return {_QUALITY_LABELS.get(k, k): v for k, v in quality.items()}
