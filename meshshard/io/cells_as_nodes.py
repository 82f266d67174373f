"""Cell-centred data: a :class:`Mesh` whose nodes are the cells of another mesh."""
from __future__ import annotations

from typing import Dict, Mapping

import numpy as np

from meshshard.io.cell_graph import _faces_of_type, cell_adjacency, cell_centroids, cell_faces, cell_offsets
from meshshard.io.cell_edges import topological_dim
from meshshard.io.mesh import Mesh
from meshshard.io.polyhedra import POLYHEDRON

__all__ = ["cells_as_nodes"]


def cells_as_nodes(mesh: Mesh) -> Mesh:
    """The cell-centred view of a mesh: one node per volume cell.

    Args:
        mesh: a vertex-based :class:`Mesh` with volume cells.

    Returns:
        :class:`Mesh` with ``nodes == "cells"`` and ``vertex_mesh`` = ``mesh``:

        - ``points`` [C, d]: the cell centres (:func:`meshshard.io.cell_graph.cell_centroids`;
          a polyhedron's volume centroid);
        - ``point_data``: ``mesh.cell_data`` (one row per cell);
        - ``edge_index()``: the cell graph (:func:`meshshard.io.cell_graph.cell_adjacency`), cells
          sharing a face in 3D or a side in 2D, both directions, no duplicates;
        - ``node_sets``: per named set of ``mesh``, the cells it names (volume cells of a set), the
          cells owning one of its faces (boundary faces of a set), or, for a set known only by
          its nodes, the cells with a face whose corners all lie in it.

        Cells are numbered as ``mesh`` numbers them (types of ``mesh.cells`` in dict order, then
        rows, then ``mesh.polyhedra``), so a cell-node field is cell data of ``mesh`` in that order.

    Raises:
        ValueError: ``mesh`` has no cells (a point cloud), or a cell type has no face table.
    """
    if not mesh.num_cells:
        raise ValueError(f"{mesh.source or 'this mesh'} has no cells (a point cloud): cell-centred nodes "
                         "need a mesh with cells; read it with nodes='points'")
    faces, owner = cell_faces(mesh.cells, mesh.polyhedra)
    sets = _cell_node_sets(mesh, faces, owner)
    out = Mesh(cell_centroids(mesh.points, mesh.cells, mesh.polyhedra), point_data=dict(mesh.cell_data),
               node_sets=sets, source=mesh.source, graph=cell_adjacency(mesh.cells, mesh.polyhedra))
    out.nodes = "cells"
    out.vertex_mesh = mesh
    return out


def _cell_node_sets(mesh: Mesh, faces: np.ndarray, owner: np.ndarray) -> Dict[str, np.ndarray]:
    """Named sets of ``mesh`` as sets of cell ids (see :func:`cells_as_nodes`)."""
    offsets = cell_offsets(mesh.cells)
    offsets[POLYHEDRON] = sum(len(c) for c in mesh.cells.values())
    top = mesh.topological_dim
    out: Dict[str, np.ndarray] = {}
    for name, per_type in mesh.cell_sets.items():
        chosen = []
        for t, idx in per_type.items():
            if t in mesh.cells or t == POLYHEDRON:
                chosen.append(offsets[t] + idx)
                continue
            corners = _corners(t, mesh.boundary_cells[t][idx])
            if topological_dim(t) == top - 1:
                chosen.append(_owners_of_faces(faces, owner, corners))
            else:  # an edge or vertex set in 3D: the cells with a face spanned by its nodes
                chosen.append(_cells_with_face_in(faces, owner, np.unique(corners), mesh.num_nodes))
        out[name] = np.unique(np.concatenate(chosen)) if chosen else np.empty(0, dtype=np.int64)
    for name, nodes in mesh.node_sets.items():
        if name not in out:
            out[name] = _cells_with_face_in(faces, owner, nodes.numpy(), mesh.num_nodes)
    return out


def _corners(cell_type: str, conn: np.ndarray) -> np.ndarray:
    """The corner nodes of boundary cells [n, corners] (mid-side nodes of quadratic cells dropped)."""
    if cell_type.startswith("polygon") or cell_type == "vertex":
        return conn
    faces = _faces_of_type(cell_type, conn.shape[1])
    return conn[:, :max(max(f) for f in faces) + 1]


def _owners_of_faces(faces: np.ndarray, owner: np.ndarray, corners: np.ndarray) -> np.ndarray:
    """Cells owning a face whose sorted corners equal a row of ``corners``."""
    if not len(corners) or corners.shape[1] > faces.shape[1]:
        return np.empty(0, dtype=np.int64)
    key = np.full((len(corners), faces.shape[1]), -1, dtype=np.int64)
    key[:, faces.shape[1] - corners.shape[1]:] = np.sort(corners, axis=1)
    _, inv = np.unique(np.concatenate([faces, key]), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    wanted = np.zeros(int(inv.max()) + 1, dtype=bool)
    wanted[inv[len(faces):]] = True
    return np.unique(owner[wanted[inv[:len(faces)]]])


def _cells_with_face_in(faces: np.ndarray, owner: np.ndarray, nodes: np.ndarray, num_nodes: int) -> np.ndarray:
    """Cells with a face whose corner nodes all lie in ``nodes``."""
    inside = np.zeros(num_nodes + 1, dtype=bool)  # the last entry answers the -1 padding
    inside[np.asarray(nodes, dtype=np.int64)] = True
    inside[-1] = True
    return np.unique(owner[inside[faces].all(axis=1)])
