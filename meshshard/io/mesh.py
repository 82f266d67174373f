"""The :class:`Mesh` container: nodes, volume cells, boundary cells, named sets, point data."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Optional, Union

import numpy as np
import torch

from meshshard.io.cell_edges import edge_index_from_cells, topological_dim
from meshshard.io.polyhedra import POLYHEDRON, Polyhedra

__all__ = ["Mesh"]

ArrayLike = Union[np.ndarray, torch.Tensor]


def _as_numpy(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _validate_points(points) -> np.ndarray:
    pts = _as_numpy(points)
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise ValueError(f"points must have shape [N, 2] or [N, 3], got {tuple(pts.shape)}")
    if not np.issubdtype(pts.dtype, np.number) or np.issubdtype(pts.dtype, np.complexfloating):
        raise TypeError(f"points must be real numbers, got dtype {pts.dtype}")
    pts = pts.astype(np.float64, copy=False)
    if pts.shape[0] == 0:
        raise ValueError("points is empty: a mesh needs at least one node")
    if not np.isfinite(pts).all():
        bad = int(np.flatnonzero(~np.isfinite(pts).all(axis=1))[0])
        raise ValueError(f"points must be finite; node {bad} is {pts[bad].tolist()}")
    return pts


def _validate_cells(cells: Mapping[str, ArrayLike], num_nodes: int, what: str) -> Dict[str, np.ndarray]:
    out: Dict[str, np.ndarray] = {}
    for ctype, conn in cells.items():
        arr = _as_numpy(conn)
        if arr.ndim != 2:
            raise ValueError(f"{what}[{ctype!r}] must be [n_cells, nodes_per_cell], got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"{what}[{ctype!r}] must hold integer node ids, got dtype {arr.dtype}")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= num_nodes):
            raise ValueError(f"{what}[{ctype!r}] refers to node ids outside [0, {num_nodes})")
        out[ctype] = arr
    return out


def _validate_polyhedra(polyhedra, num_nodes: int) -> Optional[Polyhedra]:
    if polyhedra is None:
        return None
    if not isinstance(polyhedra, Polyhedra):
        raise TypeError(f"polyhedra must be a meshshard.io.polyhedra.Polyhedra, got {type(polyhedra).__name__}")
    if polyhedra.face_nodes.size and (polyhedra.face_nodes.min() < 0 or polyhedra.face_nodes.max() >= num_nodes):
        raise ValueError(f"polyhedra refer to node ids outside [0, {num_nodes})")
    return polyhedra if polyhedra.num_cells else None


class Mesh:
    r"""A mesh or point cloud: node coordinates plus (optionally) cells and per-node fields.

    Args:
        points: float array [N, d] with d = 2 or 3 (stored as float64 numpy).
        cells: dict meshio cell type -> int array [n_cells, nodes_per_cell] of the volume cells
            (those of the highest topological dimension). Empty for a point cloud.
        boundary_cells: dict cell type -> int array of the lower-dimensional cells (boundary
            lines of a 2D mesh, boundary triangles of a 3D mesh), kept apart from the volume.
        cell_sets: dict set name -> {cell type -> row indices into ``cells[type]`` or
            ``boundary_cells[type]``, or for the type ``"polyhedron"`` into ``polyhedra``} (e.g. SU2
            markers, gmsh physical groups).
        point_data: dict name -> array with N rows.
        node_sets: dict name -> LongTensor of sorted node ids. Derived from ``cell_sets`` when
            not given.
        source: the file the mesh was read from, if any.
        cell_data: dict name -> array with one row per volume cell, the cells in the order of
            ``cells`` (its types in dict order, then the rows of each type), then the polyhedra.
        graph: a fixed node graph, LongTensor [2, E] (both directions), for a mesh whose graph
            does not come from its cells (the cell graph of :func:`meshshard.io.cells_as_nodes`).
            :meth:`edge_index` returns it, and the mesh is then no point cloud.
        polyhedra: volume cells of variable size (:class:`meshshard.io.polyhedra.Polyhedra`: face
            arrays; OpenFOAM's cells that are no hexahedron, prism, pyramid or tetrahedron),
            numbered after the cells of ``cells``; the other volume cells must then be 3D too.

    Attributes:
        points, cells, boundary_cells, cell_sets, node_sets, point_data, cell_data, source.
        polyhedra: the :class:`~meshshard.io.polyhedra.Polyhedra`, or ``None`` when there are none.
        nodes: ``"points"`` (nodes are the mesh's vertices) or ``"cells"`` (set by
            :func:`meshshard.io.cells_as_nodes`: nodes are the cells of ``vertex_mesh``).
        vertex_mesh: the vertex-based mesh a cell-centred mesh was made from, else ``None``.
    """

    def __init__(
        self,
        points: ArrayLike,
        cells: Optional[Mapping[str, ArrayLike]] = None,
        boundary_cells: Optional[Mapping[str, ArrayLike]] = None,
        cell_sets: Optional[Mapping[str, Mapping[str, ArrayLike]]] = None,
        point_data: Optional[Mapping[str, ArrayLike]] = None,
        node_sets: Optional[Mapping[str, ArrayLike]] = None,
        source: Optional[Union[str, Path]] = None,
        cell_data: Optional[Mapping[str, ArrayLike]] = None,
        graph: Optional[ArrayLike] = None,
        polyhedra: Optional[Polyhedra] = None,
    ):
        self.points: np.ndarray = _validate_points(points)
        n = self.points.shape[0]
        self.cells: Dict[str, np.ndarray] = _validate_cells(cells or {}, n, "cells")
        self.boundary_cells: Dict[str, np.ndarray] = _validate_cells(boundary_cells or {}, n, "boundary_cells")
        self.polyhedra: Optional[Polyhedra] = _validate_polyhedra(polyhedra, n)
        if POLYHEDRON in self.cells or POLYHEDRON in self.boundary_cells:
            raise ValueError(f"{POLYHEDRON!r} cells cannot be a [n, k] array: pass them as polyhedra=Polyhedra(...)")
        dims = {topological_dim(t) for t in self.cells} | ({3} if self.polyhedra is not None else set())
        if len(dims) > 1:
            raise ValueError(
                f"cells must all have one topological dimension (got types {sorted(self.cells)}"
                f"{' and polyhedra' if self.polyhedra is not None else ''}); "
                "pass lower-dimensional cells as boundary_cells"
            )
        self.point_data: Dict[str, np.ndarray] = {}
        for name, arr in (point_data or {}).items():
            arr = _as_numpy(arr)
            if arr.ndim == 0 or arr.shape[0] != n:
                raise ValueError(f"point_data[{name!r}] must have {n} rows, got shape {arr.shape}")
            self.point_data[name] = arr
        self.cell_sets: Dict[str, Dict[str, np.ndarray]] = {}
        for name, per_type in (cell_sets or {}).items():
            self.cell_sets[name] = {}
            for ctype, idx in per_type.items():
                block = self.cells.get(ctype, self.boundary_cells.get(ctype))
                if ctype == POLYHEDRON and self.polyhedra is not None:
                    block = self.polyhedra
                if block is None:
                    raise ValueError(f"cell_sets[{name!r}] refers to cell type {ctype!r} that the mesh has no cells of")
                idx = _as_numpy(idx).astype(np.int64).reshape(-1)
                if idx.size and (idx.min() < 0 or idx.max() >= len(block)):
                    raise ValueError(f"cell_sets[{name!r}][{ctype!r}] has indices outside [0, {len(block)})")
                self.cell_sets[name][ctype] = idx
        if node_sets is None:
            node_sets = {name: self._set_nodes(per_type) for name, per_type in self.cell_sets.items()}
        self.node_sets: Dict[str, torch.Tensor] = {}
        for name, ids in node_sets.items():
            ids = torch.as_tensor(_as_numpy(ids), dtype=torch.long).reshape(-1).unique(sorted=True)
            if ids.numel() and (ids.min() < 0 or ids.max() >= n):
                raise ValueError(f"node_sets[{name!r}] has node ids outside [0, {n})")
            self.node_sets[name] = ids
        self.source: Optional[Path] = Path(source) if source is not None else None
        n_cells = self.num_cells
        self.cell_data: Dict[str, np.ndarray] = {}
        for name, arr in (cell_data or {}).items():
            arr = _as_numpy(arr)
            if arr.ndim == 0 or arr.shape[0] != n_cells:
                raise ValueError(f"cell_data[{name!r}] must have one row per volume cell ({n_cells}), got shape {arr.shape}")
            self.cell_data[name] = arr
        self.graph: Optional[torch.Tensor] = None
        if graph is not None:
            g = torch.as_tensor(_as_numpy(graph), dtype=torch.long)
            if g.ndim != 2 or g.shape[0] != 2:
                raise ValueError(f"graph must be an edge index [2, E], got shape {tuple(g.shape)}")
            if g.numel() and (g.min() < 0 or g.max() >= n):
                raise ValueError(f"graph refers to node ids outside [0, {n})")
            self.graph = g
        self.nodes: str = "points"
        self.vertex_mesh: Optional["Mesh"] = None

    def _set_nodes(self, per_type: Mapping[str, np.ndarray]) -> np.ndarray:
        chunks = [self.polyhedra.subset(idx).face_nodes if t == POLYHEDRON else
                  self.cells.get(t, self.boundary_cells.get(t))[idx].reshape(-1) for t, idx in per_type.items()]
        return np.unique(np.concatenate(chunks)) if chunks else np.empty(0, dtype=np.int64)

    @classmethod
    def from_points(cls, points: ArrayLike, point_data: Optional[Mapping[str, ArrayLike]] = None) -> "Mesh":
        """A point cloud (no cells); build its graph with :func:`meshshard.io.knn_graph`.

        Args:
            points: finite float array or tensor [N, 2] or [N, 3].
            point_data: optional dict name -> array with N rows.

        Returns:
            :class:`Mesh` with empty ``cells``.
        """
        return cls(points, point_data=point_data)

    @property
    def num_nodes(self) -> int:
        """Number of nodes N (rows of ``points``)."""
        return int(self.points.shape[0])

    @property
    def dim(self) -> int:
        """Geometric dimension d of the node coordinates (2 or 3)."""
        return int(self.points.shape[1])

    @property
    def num_cells(self) -> int:
        """Number of volume cells, polyhedra included (boundary cells not counted)."""
        return int(sum(len(c) for c in self.cells.values())) + (self.polyhedra.num_cells if self.polyhedra else 0)

    def cell_counts(self) -> Dict[str, int]:
        """Number of volume cells per type, in the cell order (``"polyhedron"`` last, when any)."""
        out = {t: len(c) for t, c in self.cells.items()}
        if self.polyhedra is not None:
            out[POLYHEDRON] = self.polyhedra.num_cells
        return out

    @property
    def is_point_cloud(self) -> bool:
        """True when the mesh has no volume cells and no fixed ``graph`` (build its graph with ``knn_graph``)."""
        return self.num_cells == 0 and self.graph is None

    @property
    def topological_dim(self) -> Optional[int]:
        """Topological dimension of the volume cells, ``None`` for a point cloud."""
        if self.polyhedra is not None:
            return 3
        return topological_dim(next(iter(self.cells))) if self.cells else None

    def edge_index(self) -> torch.Tensor:
        """The undirected node graph from the element edges of the volume cells (or the fixed ``graph``):
        a polyhedron gives the sides of its faces.

        Returns:
            LongTensor [2, E]: both directions of every edge, no duplicates, no self loops,
            sorted by (row 0, row 1).

        Raises:
            ValueError: for a point cloud (use :func:`meshshard.io.knn_graph`) or a cell type
                without an edge table.
        """
        if self.is_point_cloud:
            raise ValueError(
                "this mesh has no cells (a point cloud): build its graph with "
                "meshshard.knn_graph(mesh.points, k) instead of Mesh.edge_index()"
            )
        if self.graph is not None:
            return self.graph
        return edge_index_from_cells(self.cells, self.num_nodes, polyhedra=self.polyhedra)

    def __repr__(self) -> str:
        cells = "{" + ", ".join(f"{t}: {c}" for t, c in self.cell_counts().items()) + "}" \
            if self.cells or self.polyhedra is not None else \
            "None (point cloud)" if self.is_point_cloud else "None"
        parts = [f"num_nodes={self.num_nodes}", f"dim={self.dim}", f"cells={cells}"]
        if self.boundary_cells:
            parts.append("boundary_cells={" + ", ".join(f"{t}: {len(c)}" for t, c in self.boundary_cells.items()) + "}")
        if self.node_sets:
            parts.append(f"node_sets={sorted(self.node_sets)}")
        if self.point_data:
            parts.append(f"point_data={sorted(self.point_data)}")
        if self.cell_data:
            parts.append(f"cell_data={sorted(self.cell_data)}")
        if self.nodes == "cells":
            parts.append("nodes=cells")
        return "Mesh(" + ", ".join(parts) + ")"
