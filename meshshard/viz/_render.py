"""Rendering shared by the partition plots and the field plots (private to :mod:`meshshard.viz`).

Input points and meshes, the triangles of 2D cells, the outer surface of 3D meshes, 3D framing and
shading, marker sizes, new figures and their atomic saving. Figures are made with
:class:`matplotlib.figure.Figure` directly (no pyplot), so they render with Agg, need no display,
and never touch a user's interactive backend.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple, Union

import numpy as np

from meshshard._fileutil import atomic_path
from meshshard.io import Mesh

__all__ = ["Box", "CELL_FACES_3D", "CORNERS_2D", "MAX_FACES_3D", "MAX_POINTS_3D", "PathLike", "cell_drawing_2d", "cell_fan_triangles", "check_box", "faces_seen_once", "fan_triangles", "frame_3d", "light_direction", "majority_part", "marker_size", "marker_size_3d", "new_figure", "points_and_mesh", "save_figure", "shade", "sort_rows", "surface_faces"]


PathLike = Union[str, os.PathLike]


Box = Tuple[float, float, float, float]


# corner nodes of each 2D cell type in VTK order (quadratic types: their first corners)
CORNERS_2D = {"triangle": 3, "triangle6": 3, "quad": 4, "quad8": 4, "quad9": 4}


def points_and_mesh(mesh_or_points) -> Tuple[np.ndarray, Optional[Mesh]]:
    """``(points [N, 2|3], mesh)`` of a :class:`~meshshard.io.Mesh`, or of bare points (mesh ``None``; checked)."""
    if isinstance(mesh_or_points, Mesh):
        return mesh_or_points.points, mesh_or_points
    mesh = Mesh.from_points(mesh_or_points)  # validates [N, 2|3], finite
    return mesh.points, None


def majority_part(conn: np.ndarray, assignment: np.ndarray) -> np.ndarray:
    """Part of each cell: the part owning most of its nodes (ties: the lowest part id)."""
    node_parts = assignment[conn]  # [C, k]
    k = node_parts.shape[1]
    counts = (node_parts[:, :, None] == node_parts[:, None, :]).sum(-1)  # votes for each column's part
    best = counts.max(1, keepdims=True)
    # among the most-voted parts pick the lowest id: mask the others with a large value
    cand = np.where(counts == best, node_parts, np.iinfo(np.int64).max)
    return cand.min(1) if k else np.zeros(len(conn), dtype=np.int64)


def _corners_2d(ctype: str, conn: np.ndarray) -> np.ndarray:
    """The corner nodes of 2D cells of one type (higher-order nodes dropped), in order around the cell."""
    if ctype in CORNERS_2D:
        return conn[:, : CORNERS_2D[ctype]]
    if ctype.startswith("polygon"):
        return conn
    raise ValueError(f"cannot draw 2D cell type {ctype!r}")


def fan_triangles(cells: dict, assignment: np.ndarray):
    """Triangulate 2D cells by fans over their corners; return triangles [T, 3] and their part."""
    tris, parts = [], []
    for ctype, conn in cells.items():
        corners = _corners_2d(ctype, conn)
        part = majority_part(corners, assignment)
        for i in range(1, corners.shape[1] - 1):
            tris.append(corners[:, [0, i, i + 1]])
            parts.append(part)
    return np.concatenate(tris), np.concatenate(parts)


def cell_fan_triangles(cells: dict):
    """Triangulate 2D cells by fans over their corners, keeping which cell each triangle came from.

    Args:
        cells: dict cell type -> int array [n_cells, nodes_per_cell] (2D cells).

    Returns:
        ``(triangles [T, 3], cell [T])``: ``cell`` numbers the cells as :class:`Mesh` does (types
        in dict order, then rows), so ``values[cell]`` colours each triangle by its cell's value.
    """
    tris, owner, at = [], [], 0
    for ctype, conn in cells.items():
        corners = _corners_2d(ctype, conn)
        ids = np.arange(at, at + len(conn))
        for i in range(1, corners.shape[1] - 1):
            tris.append(corners[:, [0, i, i + 1]])
            owner.append(ids)
        at += len(conn)
    if not tris:
        return np.empty((0, 3), dtype=np.int64), np.empty(0, dtype=np.int64)
    return np.concatenate(tris), np.concatenate(owner)


def cell_drawing_2d(mesh: Optional[Mesh]):
    """For a cell-centred 2D mesh (``mesh.nodes == "cells"``): ``(vertex points [P, 2], triangles
    [T, 3], cell of each triangle [T])`` to draw one colour per cell; ``None`` for other meshes."""
    if mesh is None or getattr(mesh, "nodes", "points") != "cells" or mesh.vertex_mesh is None:
        return None
    base = mesh.vertex_mesh
    if base.dim != 2 or base.topological_dim != 2:
        return None
    tris, cell = cell_fan_triangles(base.cells)
    return base.points, tris, cell


def marker_size(n_visible: int) -> float:
    """Scatter marker area (pt^2) so that n points fill a panel without hiding each other."""
    return float(np.clip(4000.0 / max(n_visible, 1), 0.05, 12.0))


def marker_size_3d(n_visible: int) -> float:
    """Scatter marker area (pt^2) of n points in a 3D panel."""
    return float(np.clip(40000.0 / max(n_visible, 1), 0.3, 12.0))


# faces of each 3D cell type in VTK node order (triangles and quads)
# (higher-order types: the faces of their corners, which come first)
CELL_FACES_3D = {
    cell_type: faces
    for names, faces in (
        (("tetra", "tetra10"), ([(0, 1, 2), (0, 1, 3), (1, 2, 3), (0, 2, 3)], [])),
        (("hexahedron", "hexahedron20", "hexahedron27"),
         ([], [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)])),
        (("wedge", "wedge15"), ([(0, 1, 2), (3, 4, 5)], [(0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)])),
        (("pyramid", "pyramid13"), ([(0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4)], [(0, 1, 2, 3)])),
    )
    for cell_type in names
}


def sort_rows(f: np.ndarray) -> np.ndarray:
    """Each row sorted, by a min/max network over the columns (rows of 3-4 ids: much faster than np.sort)."""
    cols = [f[:, j] for j in range(f.shape[1])]
    for i in range(len(cols)):
        for j in range(len(cols) - 1 - i):
            cols[j], cols[j + 1] = np.minimum(cols[j], cols[j + 1]), np.maximum(cols[j], cols[j + 1])
    return np.stack(cols, axis=1)


def faces_seen_once(faces: list) -> Optional[np.ndarray]:
    """The faces (rows of corner ids) that belong to exactly one cell: the outer surface."""
    if not faces:
        return None
    f = np.concatenate(faces)
    if not len(f):
        return f
    s = sort_rows(f)
    n, k = int(s.max()) + 1, s.shape[1]
    if n ** k < 2 ** 63:  # one integer per face: a 1-D unique is far faster than unique(axis=0)
        key = s[:, 0].copy()
        for j in range(1, k):
            key = key * n + s[:, j]
    else:
        key = np.unique(s, axis=0, return_inverse=True)[1].reshape(-1)
    order = np.argsort(key)
    key = key[order]
    first = np.r_[True, key[1:] != key[:-1]]  # first of a run of equal faces
    return f[order[first & np.r_[first[1:], True]]]  # runs of length one


def surface_faces(mesh: Optional[Mesh], keep_cells: Optional[dict] = None):
    """The faces to draw for a mesh in 3D space, as a list of corner arrays ``[F, 3]`` / ``[F, 4]``.

    A volume mesh: its outer surface (faces of the volume cells that belong to one cell only;
    the file's boundary cells when its volume cell types are unknown; faces of polyhedra larger
    than quads as triangle fans); with ``keep_cells`` (a bool mask per cell type, ``"polyhedron"``
    for the polyhedra), the surface of those cells only. A surface mesh (2D cells with 3D
    points): its cells. ``None`` for a point cloud.
    """
    if mesh is None or mesh.is_point_cloud:
        return None
    if mesh.topological_dim == 2:
        faces = [conn[:, : CORNERS_2D[t]] for t, conn in mesh.cells.items() if t in CORNERS_2D]
        return faces or None
    if mesh.topological_dim != 3:
        return None
    tris, quads = [], []
    if mesh.polyhedra is not None and all(t in CELL_FACES_3D for t in mesh.cells):
        return _polyhedral_surface(mesh, keep_cells)
    if all(t in CELL_FACES_3D for t in mesh.cells):
        for t, conn in mesh.cells.items():
            if keep_cells is not None:
                conn = conn[keep_cells[t]]
            tri_local, quad_local = CELL_FACES_3D[t]
            tris += [conn[:, list(f)] for f in tri_local]
            quads += [conn[:, list(f)] for f in quad_local]
        out = [f for f in (faces_seen_once(tris), faces_seen_once(quads)) if f is not None and len(f)]
        return out or None
    if keep_cells is not None:
        return None
    faces = [conn[:, : CORNERS_2D[t]] for t, conn in mesh.boundary_cells.items() if t in CORNERS_2D]
    return faces or None


def _polyhedral_surface(mesh: Mesh, keep_cells: Optional[dict]):
    """:func:`surface_faces` of a mesh with polyhedra (``keep_cells`` may mask ``"polyhedron"``):
    the faces seen once (:func:`faces_seen_once` per face size: equal faces have equal sizes),
    triangles and quads as they are, larger faces cut into fans."""
    from meshshard.io.polyhedra import POLYHEDRON

    by_size: dict = {}  # face size k -> [n, k] face cycles
    for t, conn in mesh.cells.items():
        if keep_cells is not None:
            conn = conn[keep_cells[t]]
        tri_local, quad_local = CELL_FACES_3D[t]
        for f in tri_local + quad_local:
            by_size.setdefault(len(f), []).append(conn[:, list(f)])
    poly = mesh.polyhedra if keep_cells is None else mesh.polyhedra.subset(np.flatnonzero(keep_cells[POLYHEDRON]))
    sizes = poly.face_sizes()
    for k in np.unique(sizes).tolist():
        faces = np.flatnonzero(sizes == k)
        by_size.setdefault(k, []).append(poly.face_nodes[poly.face_offsets[faces][:, None] + np.arange(k)])
    out = []
    for k in sorted(by_size):
        rows = faces_seen_once(by_size[k])
        if rows is not None and len(rows):
            out += [rows] if k <= 4 else [rows[:, [0, i, i + 1]] for i in range(1, k - 1)]
    return out or None


def light_direction(elev, azim) -> np.ndarray:
    """A unit vector towards a light above and left of the camera."""
    e, a = np.deg2rad(elev + 30.0), np.deg2rad(azim - 40.0)
    return np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])


def shade(points, conn, rgba, light, ambient=0.5) -> np.ndarray:
    """``rgba`` [F, 4] of faces ``conn`` scaled by how squarely each faces the light (two-sided:
    extracted faces have no consistent orientation), never below ``ambient``."""
    p = points[conn[:, :3]]
    normal = np.cross(p[:, 1] - p[:, 0], p[:, 2] - p[:, 0])
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-300)
    out = rgba.copy()
    out[:, :3] *= (ambient + (1.0 - ambient) * np.abs(normal @ light))[:, None]
    return out


# 3D panels draw at most this many surface faces; beyond, the surface's nodes are scattered
# (matplotlib depth-sorts every face of every panel in Python)
MAX_FACES_3D = 400_000


# and scatter at most this many points per 3D panel (the default of max_points)
MAX_POINTS_3D = 50_000


def frame_3d(ax, points, elev, azim, zoom=0.8):
    """Axes limits at the points' bounding box, true proportions, the camera, small axis labels;
    ``zoom`` below 1 leaves room for the z label beside a neighbouring panel."""
    lo, hi = points.min(0), points.max(0)
    ax.set_xlim(lo[0], hi[0])
    ax.set_ylim(lo[1], hi[1])
    ax.set_zlim(lo[2], hi[2])
    ax.set_box_aspect(tuple(np.maximum(hi - lo, 1e-3 * max(hi - lo))), zoom=zoom)
    ax.view_init(elev=elev, azim=azim)
    ax.set_xlabel("x", labelpad=0)
    ax.set_ylabel("y", labelpad=0)
    ax.set_zlabel("z", labelpad=-2)
    ax.tick_params(labelsize=6, pad=0)


def new_figure(figsize, dpi):
    """A matplotlib ``Figure`` (no pyplot) with constrained layout."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=dpi, layout="constrained")


def save_figure(fig, path: Optional[PathLike], dpi) -> None:
    """Write ``fig`` to ``path`` atomically, in the format of its suffix (png without one); nothing for ``None``."""
    if path is None:
        return
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi)


def check_box(zoom) -> Box:
    """``zoom`` as a box ``(xmin, xmax, ymin, ymax)`` of floats; ValueError unless it has 4 values with min < max."""
    box = tuple(float(v) for v in zoom)
    if len(box) != 4 or box[0] >= box[1] or box[2] >= box[3]:
        raise ValueError(f"zoom must be (xmin, xmax, ymin, ymax) with min < max, got {zoom}")
    return box
