"""``meshshard rollout`` under torchrun on a ``.pvd`` whose steps are ``.pvtu`` files: read piece-wise,
so that no rank holds the whole mesh.

Every rank reads the same block of pieces of every step (:func:`meshshard.io.pieces.pieces_of_rank`).
The graph comes from the first step (:func:`meshshard.ops.pieces.read_pieces_distributed`: points
numbered once, partitioned, halos built); the fields of every step are sent from the points read to
the nodes' owners (:class:`meshshard.ops.pieces.RowPush`, planned once since each step's pieces
hold the points of the first step's), giving each rank a :class:`~meshshard.io.Trajectory` of its
owned nodes. A field equal at every step on every rank is static, as
:func:`meshshard.io.read_trajectory` decides for the merged steps.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

__all__ = ["piecewise_entries", "read_owned_trajectory"]


def piecewise_entries(trajectory, world: int, group, echo: Callable[[str], None]) -> Optional[List[Tuple[float, Path]]]:
    """The ``(time, step file)`` entries of a ``.pvd`` to read piece-wise, or ``None`` to read it whole.

    Piece-wise: several ranks, a ``.pvd`` whose steps are all ``.pvtu``, the first with at least as
    many pieces as ranks, and the ``vtk`` package installed; otherwise rank 0 says in one line why
    not (when the steps are ``.pvtu``) and every rank reads the whole trajectory (collective).

    Args:
        trajectory: the rollout's trajectory argument.
        world: ranks of the group.
        group: process group.
        echo: where rank 0 prints its line.
    """
    from meshshard._optional import has_module
    from meshshard.distributed import get_rank, run_together
    from meshshard.io.pieces import piece_sources
    from meshshard.io.read_trajectory import _pvd_entries

    path = Path(trajectory)
    if world == 1 or path.suffix.lower() != ".pvd" or not path.is_file():
        return None
    entries = run_together(lambda: _pvd_entries(path), f"rollout: reading {path}", group)
    if not all(f.suffix.lower() == ".pvtu" for _, f in entries):
        return None
    count = run_together(lambda: len(piece_sources(entries[0][1])), f"rollout: reading {entries[0][1]}", group)
    why = None
    if count < world:
        why = f"its steps have {count} piece(s), fewer than the {world} ranks"
    elif not has_module("vtk"):
        why = "reading pieces one by one needs the vtk package (pip install 'meshshard[vtk]')"
    if why and get_rank(group) == 0:
        echo(f"{path.name}: {why}: every rank reads the whole trajectory")
    return None if why else entries


def _columns(fields: Dict[str, np.ndarray], names: List[str], n: int) -> np.ndarray:
    """The fields ``names`` side by side as ``float64 [n, C]``."""
    return np.concatenate([fields[k].reshape(n, -1).astype(np.float64) for k in names], axis=1) if names \
        else np.zeros((n, 0))


def read_owned_trajectory(path: Path, entries: List[Tuple[float, Path]], method: str, group):
    """Read a ``.pvd`` of ``.pvtu`` steps piece-wise (collective; see the module notes).

    Args:
        path: the ``.pvd``.
        entries: its ``(time, step file)`` entries (:func:`piecewise_entries`).
        method: partitioner of :func:`meshshard.ops.partition_distributed`.
        group: process group.

    Returns:
        ``(pg, traj, piece_fields)``: the first step's :class:`~meshshard.ops.pieces.PieceGraph`;
        the :class:`~meshshard.io.Trajectory` of the owned nodes (points ``pg.points``, no cells,
        every step's fields); per step, name -> ``[n_piece, ...]`` the fields of the points this
        rank read (for writing its pieces back).

    Raises:
        ValueError (on every rank): a step whose pieces hold other points than the first step's,
        a field missing from a step or changing its shape, a single step.
    """
    from meshshard.distributed import ReduceOp, all_reduce, run_together
    from meshshard.io import Trajectory
    from meshshard.io.pieces import read_pieces
    from meshshard.io.read import is_reader_field
    from meshshard.ops.pieces import RowPush, read_pieces_distributed

    if len(entries) < 2:
        raise ValueError(f"{path}: a trajectory needs at least 2 time steps, found {len(entries)}")
    pg = read_pieces_distributed(entries[0][1], method=method, group=group)
    first = pg.local
    names = [k for k in sorted(first.point_data) if not is_reader_field(k)]
    shapes = {k: first.point_data[k].shape[1:] for k in names}
    dtypes = {k: first.point_data[k].dtype for k in names}
    push = RowPush(pg.local_ids, pg.graph.sizes, group)
    n_local = first.num_points
    piece_fields: List[Dict[str, np.ndarray]] = []
    owned: List[np.ndarray] = []
    for i, (_, step) in enumerate(entries):
        label = f"step {i} ({step.name})"

        def read():
            ps = first if i == 0 else read_pieces(step, first.pieces)
            if ps.num_points != n_local or not np.array_equal(ps.points, first.points):
                raise ValueError(f"{path}: {label}: its pieces {first.pieces} hold other points than those of step 0 "
                                 f"({entries[0][1].name}); every step must be the same mesh, cut the same way")
            for k in names:
                if k not in ps.point_data:
                    raise ValueError(f"missing field: {label} has no point field {k!r} (step 0 has it); it has "
                                     f"{sorted(ps.point_data)}")
                if ps.point_data[k].shape[1:] != shapes[k]:
                    raise ValueError(f"field {k!r} has {ps.point_data[k].shape[1:]} columns per point in {label} "
                                     f"but {shapes[k]} in step 0")
            return {k: ps.point_data[k] for k in names}

        fields = run_together(read, f"rollout: reading {step}", group)
        piece_fields.append(fields)
        owned.append(push(torch.from_numpy(_columns(fields, names, n_local))).numpy())
    stacked, c = {}, 0
    for k in names:
        w = int(np.prod(shapes[k])) if shapes[k] else 1
        stacked[k] = np.stack([o[:, c:c + w] for o in owned]).astype(dtypes[k])
        c += w
    varies = torch.tensor([float(not (v == v[:1]).all()) for v in stacked.values()], dtype=torch.float64)
    varies = all_reduce(varies, op=ReduceOp.MAX, group=group) if len(varies) else varies
    static = {k: stacked[k][0] for k, f in zip(names, varies.tolist()) if not f}
    dynamic = {k: stacked[k] for k, f in zip(names, varies.tolist()) if f}
    traj = Trajectory(pg.points.numpy(), fields=dynamic, static=static, times=[t for t, _ in entries], source=path,
                      name=path.stem)
    return pg, traj, piece_fields
