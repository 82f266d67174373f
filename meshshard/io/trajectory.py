"""The :class:`Trajectory` container: one mesh with point fields over time steps."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Union

import numpy as np
import torch

from meshshard.io.mesh import Mesh

__all__ = ["Trajectory"]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


class Trajectory:
    r"""One mesh and its point fields at ``T`` time steps (a transient simulation).

    The mesh (points, cells) is the same at every step. Fields that do not change are kept once
    (``static``, e.g. node types); fields that evolve are kept per step (``fields``). Every field
    is two- or three-dimensional: a scalar field is one column (``F = 1``).

    Args:
        points: float array [N, d], d = 2 or 3 (stored as float64).
        cells: dict cell type -> int array [n_cells, nodes_per_cell] of the volume cells; empty
            for a point cloud (then pass ``edge_index`` or build a graph with ``knn_graph``).
        fields: dict name -> array [T, N, F] (or [T, N], taken as F = 1) of the fields per step.
        times: float array [T] of the step times, strictly increasing.
        static: dict name -> array [N, F] (or [N]) of the fields that do not change.
        boundary_cells: dict cell type -> int array of lower-dimensional cells.
        edge_index: optional LongTensor [2, E] of a given graph (used instead of the cells').
        source: the file or folder the trajectory was read from.
        name: a short name for it (the case name; a MeshGraphNets trajectory's index).

    Attributes:
        points [N, d] float64, cells, boundary_cells, fields {name: [T, N, F]},
        static {name: [N, F]}, times [T] float64, source, name.

    Raises:
        ValueError: fewer than two steps, fields whose shapes disagree with ``times`` / ``points``,
            a field both static and per step, times not strictly increasing.
    """

    def __init__(
        self,
        points,
        cells: Optional[Mapping[str, object]] = None,
        *,
        fields: Mapping[str, object],
        times,
        static: Optional[Mapping[str, object]] = None,
        boundary_cells: Optional[Mapping[str, object]] = None,
        edge_index: Optional[torch.Tensor] = None,
        source: Optional[Union[str, Path]] = None,
        name: Optional[str] = None,
    ):
        # the Mesh constructor validates points and cells
        self._mesh = Mesh(points, cells=cells or {}, boundary_cells=boundary_cells or {}, source=source)
        self.points: np.ndarray = self._mesh.points
        self.cells: Dict[str, np.ndarray] = self._mesh.cells
        self.boundary_cells: Dict[str, np.ndarray] = self._mesh.boundary_cells
        self.source: Optional[Path] = Path(source) if source is not None else None
        self.name: str = name if name is not None else (self.source.stem if self.source is not None else "trajectory")
        where = f" ({self.source})" if self.source is not None else ""
        n = self.num_nodes

        self.times: np.ndarray = np.asarray(_as_numpy(times), dtype=np.float64).reshape(-1)
        t = self.times.size
        if t < 2:
            raise ValueError(f"a trajectory needs at least 2 time steps, got {t}{where}: a single step is a "
                             "steady sample (read it with meshshard.read_mesh)")
        if not np.isfinite(self.times).all():
            raise ValueError(f"trajectory times must be finite{where}, got {self.times.tolist()[:8]}")
        steps = np.diff(self.times)
        if (steps <= 0).any():
            k = int(np.flatnonzero(steps <= 0)[0])
            raise ValueError(f"trajectory times must be strictly increasing{where}: step {k + 1} has time "
                             f"{float(self.times[k + 1])!r} after {float(self.times[k])!r}")

        self.fields: Dict[str, np.ndarray] = {}
        for key, arr in fields.items():
            arr = _as_numpy(arr)
            if arr.ndim == 2:
                arr = arr[:, :, None]
            if arr.ndim != 3 or arr.shape[0] != t or arr.shape[1] != n:
                raise ValueError(f"field {key!r} must have shape [T={t}, N={n}, F] (or [T, N]){where}, "
                                 f"got {tuple(arr.shape)}")
            self.fields[key] = arr
        self.static: Dict[str, np.ndarray] = {}
        for key, arr in (static or {}).items():
            arr = _as_numpy(arr)
            if arr.ndim == 1:
                arr = arr[:, None]
            if arr.ndim != 2 or arr.shape[0] != n:
                raise ValueError(f"static field {key!r} must have shape [N={n}, F] (or [N]){where}, "
                                 f"got {tuple(arr.shape)}")
            if key in self.fields:
                raise ValueError(f"field {key!r} is given both as static and per step{where}")
            self.static[key] = arr

        self._edge_index = None
        if edge_index is not None:
            ei = torch.as_tensor(_as_numpy(edge_index), dtype=torch.long)
            if ei.dim() != 2 or ei.shape[0] != 2:
                raise ValueError(f"edge_index must have shape [2, E], got {tuple(ei.shape)}")
            if ei.numel() and (ei.min() < 0 or ei.max() >= n):
                raise ValueError(f"edge_index refers to node ids outside [0, {n})")
            self._edge_index = ei

    @property
    def num_steps(self) -> int:
        """Number of time steps T."""
        return int(self.times.size)

    @property
    def num_nodes(self) -> int:
        """Number of nodes N."""
        return int(self.points.shape[0])

    @property
    def dim(self) -> int:
        """Geometric dimension d of the points (2 or 3)."""
        return int(self.points.shape[1])

    @property
    def field_names(self) -> List[str]:
        """Sorted names of every field, static and per step."""
        return sorted(set(self.fields) | set(self.static))

    @property
    def mesh(self) -> Mesh:
        """The mesh without fields (points, cells, boundary cells): what a partitioner needs."""
        return self._mesh

    def field(self, name: str) -> np.ndarray:
        """A field at every step.

        Args:
            name: a per-step or static field.

        Returns:
            array [T, N, F]; a static field is repeated over the steps (a read-only broadcast view).

        Raises:
            KeyError: no such field (the message lists the fields there are).
        """
        if name in self.fields:
            return self.fields[name]
        if name in self.static:
            arr = self.static[name]
            return np.broadcast_to(arr[None], (self.num_steps,) + arr.shape)
        raise KeyError(f"trajectory {self.name!r} has no field {name!r}; per step: {sorted(self.fields)}, "
                       f"static: {sorted(self.static)}")

    def step(self, t: int) -> Mesh:
        """Step ``t`` as a :class:`Mesh` whose ``point_data`` holds the static fields and the
        fields at that step (each [N, F]).

        Args:
            t: step index in ``[-T, T)``.
        """
        if not -self.num_steps <= t < self.num_steps:
            raise IndexError(f"step {t} out of range for a trajectory of {self.num_steps} steps")
        data = dict(self.static)
        data.update({k: v[t] for k, v in self.fields.items()})
        m = self._mesh
        return Mesh(m.points, cells=m.cells, boundary_cells=m.boundary_cells, point_data=data, source=self.source)

    def edge_index(self, knn: Optional[int] = None) -> torch.Tensor:
        """The node graph: the given ``edge_index``, else the element edges of the cells, else (a
        point cloud) the ``knn`` nearest neighbours of every point when ``knn`` is given.

        Args:
            knn: neighbours per point for a point cloud without a given graph.

        Returns:
            LongTensor [2, E] (both directions of every mesh edge; for ``knn``, as
            :func:`meshshard.io.knn_graph`).

        Raises:
            ValueError: a point cloud without a given graph and no ``knn``.
        """
        if self._edge_index is not None:
            return self._edge_index
        if self._mesh.is_point_cloud and knn is not None:
            from meshshard.io.knn import knn_graph

            return knn_graph(self.points, knn)
        return self._mesh.edge_index()

    def __repr__(self) -> str:
        cells = "{" + ", ".join(f"{k}: {len(v)}" for k, v in self.cells.items()) + "}" if self.cells else "None"
        f = ", ".join(f"{k}: {list(v.shape)}" for k, v in self.fields.items())
        s = ", ".join(f"{k}: {list(v.shape)}" for k, v in self.static.items())
        return (f"Trajectory(name={self.name!r}, num_steps={self.num_steps}, num_nodes={self.num_nodes}, "
                f"dim={self.dim}, cells={cells}, fields={{{f}}}, static={{{s}}})")
