"""``meshshard rollout`` under torchrun: every step written piece by piece, no rank gathers the state.

Each rank writes, for every step, one ``.vtu`` piece holding the cells it holds and their points
(its owned nodes and the other points of those cells), with the step's true fields, ``<field>_pred``
and ``<field>_error`` (the predicted rows of points owned elsewhere fetched from their owners with
:class:`meshshard.ops.pieces.RowFetch`) and ``GlobalPointIds`` (the node's index in the trajectory,
which joins the pieces' border points when the ``.pvtu`` is read merged). Rank 0 writes the step's
``.pvtu`` master, the ``.pvd`` collection of the masters and the error plot from the RMSE per step,
which is summed over the ranks' owned rows (an all-reduce of two numbers per field and step).

Layout, for ``OUT`` and the trajectory ``<name>``::

    OUT/<name>.pvd                                   the steps, each a .pvtu
    OUT/<name>/<name>_XXXX.pvtu                      step XXXX (counted from the start)
    OUT/<name>/<name>_XXXX/<name>_XXXX_RRRR.vtu      its piece from rank RRRR
    OUT/<name>_rollout_error.png

The pieces are written with meshio; :func:`meshshard.io.read_mesh` reads the ``.pvtu`` back merged
(through meshio when the ``vtk`` package is missing).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch

__all__ = ["RolloutPieces", "write_rollout_pieces"]

#: the point field naming every point of a piece (its node index in the trajectory)
GLOBAL_IDS = "GlobalPointIds"


class RolloutPieces:
    """What this rank writes of every step: its cells, their points and how to fetch their rows.

    Args:
        points: ``float64 [n_piece, d]`` the piece's points.
        cells: meshio type -> ``int64 [n, k]`` its cells, as rows of ``points`` (none: a vertex per point).
        global_ids: ``int64 [n_piece]`` a number of every point that is the same in every piece holding it.
        fetch: the :class:`~meshshard.ops.pieces.RowFetch` of the points' nodes (ShardTensor order).
    """

    def __init__(self, points: np.ndarray, cells: Dict[str, np.ndarray], global_ids: np.ndarray, fetch) -> None:
        self.points, self.cells, self.global_ids, self._fetch = points, cells, global_ids, fetch

    @classmethod
    def from_partition(cls, points: np.ndarray, cells: Dict[str, np.ndarray], owner: np.ndarray, row: np.ndarray,
                       sizes: Sequence[int], rank: int, group=None) -> "RolloutPieces":
        """The piece of a trajectory every rank holds whole (collective).

        A volume cell belongs to the rank that owns its first point; the piece's points are this
        rank's owned nodes and every point of its cells, in trajectory order, numbered by their
        trajectory index.

        Args:
            points: ``float64 [N, d]`` the trajectory's points.
            cells: meshio type -> ``int [n, k]`` its volume cells (empty for a point cloud).
            owner: ``int [N]`` the rank owning each node.
            row: ``int [N]`` each node's row in ShardTensor order.
            sizes: owned nodes of every rank.
            rank: this rank.
            group: process group.
        """
        from meshshard.ops.pieces import RowFetch

        owner = np.asarray(owner)
        mine = {t: np.asarray(c, dtype=np.int64)[owner[np.asarray(c)[:, 0]] == rank] for t, c in cells.items()}
        ids = np.unique(np.concatenate([np.flatnonzero(owner == rank)] + [c.reshape(-1) for c in mine.values()]))
        ids = ids.astype(np.int64)
        fetch = RowFetch(torch.from_numpy(np.asarray(row, dtype=np.int64)[ids]), sizes, group)
        return cls(np.asarray(points, dtype=np.float64)[ids],
                   {t: np.searchsorted(ids, c) for t, c in mine.items() if len(c)}, ids, fetch)

    @classmethod
    def from_piece_graph(cls, pg, group=None) -> "RolloutPieces":
        """The pieces this rank read (:func:`meshshard.ops.pieces.read_pieces_distributed`), as they were (collective).

        Args:
            pg: this rank's :class:`~meshshard.ops.pieces.PieceGraph`.
            group: process group.
        """
        from meshshard.ops.pieces import RowFetch

        ps = pg.local
        ids = ps.global_ids if pg.key_kind == "ids" else pg.point_ids
        return cls(ps.points[:, :pg.dim], ps.cells(), np.asarray(ids, dtype=np.int64),
                   RowFetch(pg.local_ids, pg.graph.sizes, group))

    def rows(self, owned: torch.Tensor) -> torch.Tensor:
        """The rows of the piece's points from the owned rows of every rank (collective).

        Args:
            owned: ``[n_owned, C]`` this rank's owned rows.

        Returns:
            ``[n_piece, C]`` in the order of the piece's points.
        """
        return self._fetch(owned)


def _write_vtu(path: Path, points: np.ndarray, cells: Dict[str, np.ndarray], point_data: Dict[str, np.ndarray]):
    """One piece as a ``.vtu`` through meshio, atomically (3D points; a vertex per point without cells)."""
    import meshio

    from meshshard._fileutil import atomic_path

    n = len(points)
    xyz = np.zeros((n, 3))
    xyz[:, :points.shape[1]] = points
    blocks = [(t, c) for t, c in cells.items()] or [("vertex", np.arange(n).reshape(n, 1))]
    with atomic_path(path) as tmp:
        meshio.write(tmp, meshio.Mesh(xyz, blocks, point_data=point_data), file_format="vtu")


def write_rollout_pieces(out_dir: Path, name: str, pieces: RolloutPieces, piece_fields: Callable[[int], dict],
                         times: Sequence[float], states: List[torch.Tensor], truth_owned: torch.Tensor, keys,
                         first_step: int, num_nodes: int, group=None, progress: bool = False) -> Dict[str, object]:
    """Write every step's pieces, masters, the collection and the error plot (collective).

    Args:
        out_dir: the output folder.
        name: the trajectory's name in the file names.
        pieces: this rank's :class:`RolloutPieces`.
        piece_fields: ``k -> {name: [n_piece, ...]}`` the true fields of the piece's points at the
            ``k``-th written step.
        times: the time of every written step.
        states: per written step ``float64 [n_owned, S]`` the predicted owned rows.
        truth_owned: ``float64 [steps + 1, n_owned, S]`` the true state of the owned rows.
        keys: ``(output name, first column, width)`` per state field.
        first_step: the trajectory step the rollout started from (the plot's first abscissa).
        num_nodes: nodes of the whole mesh.
        group: process group.
        progress: a progress bar (rank 0).

    Returns:
        ``{"pvd", "png", "rmse": {field: [steps + 1]}}`` on every rank (the files written by rank 0).
    """
    from tqdm import tqdm

    from meshshard.distributed import all_reduce, get_rank, get_world_size, run_together
    from meshshard.io import write_pvd
    from meshshard.io.pieces import write_pvtu
    from meshshard.viz import plot_rollout_error

    rank, world = get_rank(group), get_world_size(group)
    frames = out_dir / name
    entries = []
    width = states[0].shape[1]
    for k in tqdm(range(len(states)), desc="write", unit="step", disable=not progress or rank != 0, file=sys.stderr):
        both = pieces.rows(torch.cat([states[k], truth_owned[k]], dim=1)).numpy()
        pred, true = both[:, :width], both[:, width:]
        step = f"{name}_{k:04d}"
        files = [Path(step) / f"{step}_{r:04d}.vtu" for r in range(world)]

        def write() -> None:
            fields = {}
            for key, c0, w in keys:
                p, e = pred[:, c0:c0 + w], pred[:, c0:c0 + w] - true[:, c0:c0 + w]
                fields[f"{key}_pred"] = p[:, 0] if w == 1 else p
                fields[f"{key}_error"] = e[:, 0] if w == 1 else e
            point_data = {**piece_fields(k), GLOBAL_IDS: pieces.global_ids, **fields}
            (frames / step).mkdir(parents=True, exist_ok=True)
            _write_vtu(frames / files[rank], pieces.points, pieces.cells, point_data)
            if rank == 0:
                write_pvtu(frames / f"{step}.pvtu", files, point_data)

        run_together(write, f"rollout: writing {frames / files[rank]}", group)
        entries.append((float(times[k]), Path(name) / f"{step}.pvtu"))
    # RMSE per field and step: squared errors of the owned rows, summed over the ranks
    err = torch.stack(states) - truth_owned
    sums = torch.stack([(err[:, :, c0:c0 + w] ** 2).sum(dim=(1, 2)) for _, c0, w in keys], dim=1)  # [T, fields]
    sums = all_reduce(sums, group=group)
    rmse = {key: [float((sums[k, j] / (num_nodes * w)) ** 0.5) for k in range(len(states))]
            for j, (key, _, w) in enumerate(keys)}
    pvd, png = out_dir / f"{name}.pvd", out_dir / f"{name}_rollout_error.png"

    def finish() -> None:
        write_pvd(pvd, entries)
        plot_rollout_error(list(range(first_step, first_step + len(states))), rmse, png,
                           title=f"{name}: rollout from step {first_step}")

    run_together(lambda: finish() if rank == 0 else None, f"rollout: writing {pvd}", group)
    return {"pvd": pvd, "png": png, "rmse": rmse}

