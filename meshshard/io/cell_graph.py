"""The cell graph (dual graph) of a mesh: cells joined when they share a face (3D) or an edge (2D).

Finite-volume data lives at cell centres; its graph connects two cells through each face they
share. Faces are matched by their corner nodes, so mixed element types (a hexahedron's quad face
against a pyramid's base, a wedge's triangle against a tetrahedron's) and quadratic elements (their
mid-side nodes are ignored) work alike. Polyhedra (:class:`meshshard.io.polyhedra.Polyhedra`)
bring their own faces: all their nodes are corners, so a face split by hanging nodes matches only
the neighbour's face with the same nodes, which is how OpenFOAM stores a face between two cells.
Cells are numbered as :class:`meshshard.io.Mesh` numbers them: the types of ``cells`` in dict
order, then the rows of each type, then the polyhedra. Local node numbering follows VTK, as in
:mod:`meshshard.io.cell_edges`.
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np
import torch

from meshshard.io.cell_edges import coalesce_undirected, topological_dim
from meshshard.io.polyhedra import Polyhedra

__all__ = ["CELL_FACES", "cell_faces", "cell_adjacency", "cell_centroids", "cell_offsets", "sorted_faces"]

_TRI_SIDES = ((0, 1), (1, 2), (2, 0))
_QUAD_SIDES = ((0, 1), (1, 2), (2, 3), (3, 0))
_TET = ((0, 1, 2), (0, 1, 3), (1, 2, 3), (0, 2, 3))
_HEX = ((0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7))
_WEDGE = ((0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5))
_PYRAMID = ((0, 1, 2, 3), (0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4))

#: Corner nodes of every face of a cell, per meshio cell type (VTK node order): the sides of a 2D
#: cell, the faces of a 3D cell. Quadratic cells use their corner nodes. ``polygon<k>`` cells
#: (``k`` nodes each) have the sides of their node cycle.
CELL_FACES: Dict[str, Tuple[Tuple[int, ...], ...]] = {
    "line": ((0,), (1,)), "line3": ((0,), (1,)),
    "triangle": _TRI_SIDES, "triangle6": _TRI_SIDES,
    "quad": _QUAD_SIDES, "quad8": _QUAD_SIDES, "quad9": _QUAD_SIDES,
    "tetra": _TET, "tetra10": _TET,
    "hexahedron": _HEX, "hexahedron20": _HEX, "hexahedron27": _HEX,
    "wedge": _WEDGE, "wedge15": _WEDGE,
    "pyramid": _PYRAMID, "pyramid13": _PYRAMID,
}

_NODES_PER_CELL = {"line": 2, "line3": 3, "triangle": 3, "triangle6": 6, "quad": 4, "quad8": 8, "quad9": 9,
                   "tetra": 4, "tetra10": 10, "hexahedron": 8, "hexahedron20": 20, "hexahedron27": 27,
                   "wedge": 6, "wedge15": 15, "pyramid": 5, "pyramid13": 13}


def _faces_of_type(cell_type: str, k: int) -> Tuple[Tuple[int, ...], ...]:
    """The face table of ``cell_type`` for cells of ``k`` nodes (checked)."""
    if cell_type.startswith("polygon"):
        return tuple((i, (i + 1) % k) for i in range(k))
    if cell_type not in CELL_FACES:
        raise ValueError(f"cell type {cell_type!r} has no face table for the cell graph; supported: "
                         f"{sorted(CELL_FACES) + ['polygon<k>']}")
    if k != _NODES_PER_CELL[cell_type]:
        raise ValueError(f"{cell_type} cells need {_NODES_PER_CELL[cell_type]} nodes each, got {k}")
    return CELL_FACES[cell_type]


def cell_offsets(cells: Mapping[str, np.ndarray]) -> Dict[str, int]:
    """Global id of the first cell of every type (cells numbered in dict order, then by row).

    Args:
        cells: dict cell type -> int array [n_cells, nodes_per_cell].

    Returns:
        dict cell type -> offset.
    """
    out, at = {}, 0
    for t, c in cells.items():
        out[t] = at
        at += len(c)
    return out


def cell_faces(cells: Mapping[str, np.ndarray], polyhedra: Optional[Polyhedra] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Every face of every cell as sorted corner nodes.

    Args:
        cells: dict cell type -> int array [n_cells, nodes_per_cell] (one topological dimension).
        polyhedra: optional polyhedral cells, numbered after ``cells``; every node of a
            polyhedron's face is one of its corners.

    Returns:
        ``(faces, owner)``: int64 ``[F, w]`` with each face's corner nodes sorted ascending and
        padded with -1 to the widest face ``w``, and int64 ``[F]`` the global id of its cell.
    """
    offsets = cell_offsets(cells)
    blocks: List[Tuple[np.ndarray, np.ndarray]] = []
    width = 1
    for t, c in cells.items():
        c = np.asarray(c, dtype=np.int64)
        if c.ndim != 2:
            raise ValueError(f"{t} cells must be a 2-D array [n_cells, nodes_per_cell], got shape {c.shape}")
        if not len(c):
            continue
        ids = np.arange(offsets[t], offsets[t] + len(c), dtype=np.int64)
        for face in _faces_of_type(t, c.shape[1]):
            blocks.append((np.sort(c[:, list(face)], axis=1), ids))
            width = max(width, len(face))
    if polyhedra is not None and polyhedra.num_cells:
        width = max(width, int(polyhedra.face_sizes().max()))
    if not blocks and (polyhedra is None or not polyhedra.num_cells):
        return np.empty((0, width), dtype=np.int64), np.empty(0, dtype=np.int64)
    faces = np.full((sum(len(f) for f, _ in blocks), width), -1, dtype=np.int64)
    at = 0
    for f, _ in blocks:
        faces[at:at + len(f), width - f.shape[1]:] = f  # the -1 padding first keeps each row sorted
        at += len(f)
    owners = [ids for _, ids in blocks]
    if polyhedra is not None and polyhedra.num_cells:
        poly_faces = sorted_faces(polyhedra.face_nodes, polyhedra.face_offsets, width)
        faces = np.concatenate([faces, poly_faces]) if blocks else poly_faces
        owners.append(sum(len(c) for c in cells.values()) + polyhedra.face_cell())
    return faces, np.concatenate(owners)


def sorted_faces(face_nodes: np.ndarray, face_offsets: np.ndarray, width: int) -> np.ndarray:
    """Faces of any sizes (``face_nodes`` [S] concatenated, ``face_offsets`` [F + 1]) as rows
    [F, width] of their nodes sorted ascending, the -1 padding first (so equal faces are equal rows)."""
    sizes = np.diff(face_offsets)
    face = np.repeat(np.arange(len(sizes)), sizes)
    nodes = face_nodes[np.lexsort((face_nodes, face))]  # sorted within each face
    col = width - sizes[face] + (np.arange(len(face)) - face_offsets[face])
    out = np.full((len(sizes), width), -1, dtype=np.int64)
    out[face, col] = nodes
    return out


def cell_adjacency(cells: Mapping[str, np.ndarray], polyhedra: Optional[Polyhedra] = None) -> torch.Tensor:
    """The cell graph: two cells are joined when they share a face (3D cells) or a side (2D cells).

    A face shared by more than two cells (a non-manifold surface edge) joins every pair of them.
    Faces are matched by their corner nodes: cells that touch only in part of a face (hanging
    nodes) are not joined.

    Args:
        cells: dict cell type -> int array [n_cells, nodes_per_cell], all of one topological
            dimension (a :class:`meshshard.io.Mesh`'s ``cells``).
        polyhedra: optional polyhedral cells (a mesh's ``polyhedra``), numbered after ``cells``.

    Returns:
        LongTensor [2, E] over the C cells (polyhedra included): both directions, no duplicates, no self loops, sorted by
        (row 0, row 1).

    Raises:
        ValueError: cells of mixed dimensions, or a type without a face table.
    """
    has_poly = polyhedra is not None and polyhedra.num_cells > 0
    dims = {topological_dim(t) for t in cells} | ({3} if has_poly else set())
    if len(dims) > 1:
        raise ValueError(f"cells must all have one topological dimension to form a cell graph, got {sorted(cells)}"
                         f"{' and polyhedra' if has_poly else ''}")
    num_cells = sum(len(c) for c in cells.values()) + (polyhedra.num_cells if has_poly else 0)
    faces, owner = cell_faces(cells, polyhedra)
    if len(faces) < 2:
        return torch.empty(2, 0, dtype=torch.long)
    order = np.lexsort(faces.T[::-1])
    faces, owner = faces[order], owner[order]
    same = (faces[1:] == faces[:-1]).all(axis=1)  # row i equals row i + 1
    pairs = []
    # join every face with the next d rows of its group: d = 1 covers manifold meshes, larger d the
    # rare faces shared by three or more cells
    run = same.copy()
    d = 1
    while run.any():
        i = np.flatnonzero(run)
        pairs.append(np.stack([owner[i], owner[i + d]], axis=1))
        d += 1
        if d >= len(faces):
            break
        run = run[:-1] & same[d - 1:]
    if not pairs:
        return torch.empty(2, 0, dtype=torch.long)
    return coalesce_undirected(np.concatenate(pairs), num_cells)


def cell_centroids(points: np.ndarray, cells: Mapping[str, np.ndarray],
                   polyhedra: Optional[Polyhedra] = None) -> np.ndarray:
    """The centre of every cell: the mean of its corner nodes; for a polyhedron its volume centroid.

    For simplices (triangles, tetrahedra) this is the geometric centroid; for other cells the
    vertex average, which lies inside every convex cell. A polyhedron's vertex average would lean
    towards the side with hanging nodes: it gets the volume centroid OpenFOAM computes
    (:meth:`meshshard.io.polyhedra.Polyhedra.centroids`).

    Args:
        points: float array [N, d].
        cells: dict cell type -> int array [n_cells, nodes_per_cell].
        polyhedra: optional polyhedral cells, numbered after ``cells`` (3-D points).

    Returns:
        float64 array [C, d], cells numbered as in :func:`cell_offsets`.
    """
    points = np.asarray(points, dtype=np.float64)
    out = []
    for t, c in cells.items():
        c = np.asarray(c, dtype=np.int64)
        if t.startswith("polygon"):
            corners = c.shape[1]
        else:
            faces = _faces_of_type(t, c.shape[1])
            corners = max(max(f) for f in faces) + 1  # corner nodes come first in VTK order
        out.append(points[c[:, :corners]].mean(axis=1))
    if polyhedra is not None and polyhedra.num_cells:
        out.append(polyhedra.centroids(points))
    if not out:
        return np.empty((0, points.shape[1]), dtype=np.float64)
    return np.concatenate(out)
