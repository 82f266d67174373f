"""Helpers shared by the commands: loading a mesh and its graph, partitioning with a progress bar,
the process group and device of a command run under torchrun, and printing tables."""
from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Iterable, List, Optional, Sequence, Tuple

import torch

from meshshard.partitioners.registry import PARTITIONERS

__all__ = ["METHODS", "NODES", "add_nodes_argument", "load_mesh_and_graph", "run_partition", "format_table",
           "format_quality", "progress"]

#: the -m choices of every command that partitions (partition, preprocess, plot, predict, demo): one list
METHODS = tuple(PARTITIONERS)
#: the --nodes choices: mesh vertices (the default) or cell centres (finite-volume data)
NODES = ("points", "cells")



@contextlib.contextmanager
def torchrun_device(choice: str):
    """For a command that may run under torchrun: start the process group (NCCL on CUDA, gloo on
    the CPU; nothing without torchrun's variables), yield the device to compute on, and end the
    group it started, with a closing barrier only when the body finished (a failed rank's peers
    failed alike through ``run_together``, so none waits).

    Args:
        choice: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.

    Raises:
        ValueError: ``"cuda"`` without CUDA.
    """
    from meshshard.distributed import destroy_distributed, init_distributed, is_initialized

    use_cuda = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
    if use_cuda and not torch.cuda.is_available():
        raise ValueError("--device cuda: CUDA is not available")
    started_here = not is_initialized()
    init_distributed(backend="nccl" if use_cuda else "gloo")  # a no-op without torchrun's variables
    started_here = started_here and is_initialized()
    finished = False
    try:
        yield torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
        finished = True
    finally:
        if started_here:
            destroy_distributed(barrier=finished)

def add_nodes_argument(parser, default: Optional[str] = "points", extra: str = "") -> None:
    """Add ``--nodes {points,cells}`` to a command's parser (one wording for every command).

    Args:
        parser: the command's ``argparse`` parser.
        default: the default choice (``None``: taken from the input, as the command says in ``extra``).
        extra: a sentence appended to the help.
    """
    parser.add_argument("--nodes", choices=NODES, default=default,
                        help="points: the mesh vertices are the nodes and point fields their fields; cells: "
                             "cell-centred data (finite-volume solutions), the volume cells are the nodes (at their "
                             "centres), cell fields their fields, cells sharing a face (3D) or side (2D) their edges"
                             + (f" (default: {default})" if default else "") + (f". {extra}" if extra else ""))


def progress(total: int, desc: str, enabled: bool = True):
    """A tqdm bar on stderr over the steps of a command.

    Args:
        total: number of steps.
        desc: the command's name; ``bar.set_postfix_str(step)`` names the current step.
        enabled: False for ``-q``.
    """
    from tqdm import tqdm

    bar = tqdm(total=total, desc=f"{desc}: starting", disable=not enabled, file=sys.stderr, leave=False,
               bar_format="{desc}[step {n_fmt}/{total_fmt}, {elapsed}]")
    # the steps name themselves in the description ("meshshard plot: reading x.su2")
    bar.set_postfix_str = lambda s, refresh=True: bar.set_description(f"{desc}: {s}", refresh=refresh)
    return bar


def load_mesh_and_graph(path, knn: int, bar=None, nodes: str = "points"):
    """Read a mesh (or point cloud) and build its node graph.

    Args:
        path: mesh or point-cloud file.
        knn: neighbours per point for a point cloud (a file without cells).
        bar: optional :func:`progress` bar.
        nodes: ``"points"`` or ``"cells"`` (``read_mesh(path, nodes=...)``).

    Returns:
        (mesh, edge_index [2, E], graph_info dict for meta.json)
    """
    from meshshard.io import mesh_graph, mesh_graph_info, read_mesh

    if bar is not None:
        bar.set_postfix_str(f"reading {Path(path).name}")
    mesh = read_mesh(path, nodes=nodes)
    if bar is not None:
        bar.update()
        bar.set_postfix_str("building graph")
    edge_index = mesh_graph(mesh, knn)  # element edges, or the directed kNN graph of a point cloud
    info = mesh_graph_info(mesh, knn)
    if bar is not None:
        bar.update()
    return mesh, edge_index, info


def run_partition(mesh, edge_index, num_parts: int, method: str, seed: int, refine: bool, bar=None):
    """Partition the mesh nodes with :func:`meshshard.partitioners.partition`.

    Args:
        mesh: the mesh; edge_index: its graph ``[2, E]``; num_parts: ``-k``; method: ``-m``;
        seed: partitioner seed; refine: boundary refinement of geometric cuts; bar: optional bar.

    Raises:
        ValueError: ``num_parts`` < 1 or larger than the node count, or an unknown method.
    """
    if num_parts < 1:
        raise ValueError(f"-k/--num-parts must be >= 1, got {num_parts}")
    if num_parts > mesh.num_nodes:
        raise ValueError(f"-k {num_parts} is more parts than the mesh has nodes ({mesh.num_nodes})")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    from meshshard.partitioners import partition

    if bar is not None:
        bar.set_postfix_str(f"partitioning ({method}, {num_parts} parts)")
    part = partition(torch.from_numpy(mesh.points), num_parts, method=method, edge_index=edge_index,
                     seed=seed, refine=refine)
    if bar is not None:
        bar.update()
    return part


def format_table(headers: Sequence[str], rows: Iterable[Sequence], align: Optional[str] = None) -> str:
    """A plain-text table; numbers right-aligned, text left-aligned.

    Args:
        headers: column names.
        rows: rows of values (ints get thousands separators, floats 4 significant digits).
        align: one ``l`` / ``r`` per column (default: by content).
    """
    rows = [[_fmt(v) for v in r] for r in rows]
    cols = list(zip(*([list(headers)] + rows))) if rows else [[h] for h in headers]
    widths = [max(len(str(c)) for c in col) for col in cols]
    if align is None:
        align = "".join("r" if rows and all(_is_num(r[i]) for r in rows) else "l" for i in range(len(headers)))

    def line(vals):
        return "  ".join(str(v).rjust(w) if a == "r" else str(v).ljust(w) for v, w, a in zip(vals, widths, align)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def format_quality(quality: Optional[dict]) -> str:
    """The partition quality report as a two-column table (lists shown as min / max).

    Args:
        quality: :func:`meshshard.partition_quality`'s dict (or None).
    """
    if not quality:
        return "(no quality report)"
    rows: List[Tuple[str, str]] = []
    for key, value in quality.items():
        if isinstance(value, torch.Tensor):
            value = value.tolist()
        if isinstance(value, (list, tuple)):
            flat = [v for v in value if isinstance(v, (int, float))]
            value = f"min {_fmt(min(flat))}  max {_fmt(max(flat))}  ({len(value)} values)" if flat else str(value)
        rows.append((key, value))
    return format_table(["quality", "value"], rows, align="lr")


def _fmt(v) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}" if v.is_integer() else f"{v:,.1f}"
        return f"{v:.4g}"
    return str(v)


def _is_num(s: str) -> bool:
    try:
        float(str(s).replace(",", ""))
        return True
    except ValueError:
        return False
