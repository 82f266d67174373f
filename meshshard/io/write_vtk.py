"""A ``.vtu`` written through the ``vtk`` package, for meshes with polyhedral cells.

meshio's ``.vtu`` writer cannot mix polyhedra with other cell types ("VTU export cannot mix
polyhedral cells with other cell types"), and an OpenFOAM mesh mixes them as a rule. This writer
builds a ``vtkUnstructuredGrid`` with the fixed-size cells and the polyhedra (their face streams,
no point added) in :class:`meshshard.io.Mesh`'s cell order, so a cell field in that order is
cell data of the file as it is, and VTK (ParaView) reads the same polyhedra back.
"""
from __future__ import annotations

import os
from typing import Mapping, Optional, Union

import numpy as np

from meshshard._optional import require
from meshshard.io.polyhedra import VTK_POLYHEDRON, Polyhedra

__all__ = ["write_vtu_vtk"]

PathLike = Union[str, os.PathLike]


def _vtk_type(cell_type: str) -> int:
    from meshshard.io.vtk_formats import vtk_cell_type_names

    if cell_type.startswith("polygon"):
        return 7
    ids = {}
    for vtk_id, name in vtk_cell_type_names().items():
        ids.setdefault(name, vtk_id)  # VTK_QUAD (9) before VTK_PIXEL's order, VTK_HEXAHEDRON before VOXEL
    ids.update({"quad": 9, "hexahedron": 12})
    if cell_type not in ids:
        raise ValueError(f"cell type {cell_type!r} has no VTK cell type to write")
    return ids[cell_type]


def _cell_array(offsets: np.ndarray, conn: np.ndarray):
    from vtkmodules.util.numpy_support import numpy_to_vtkIdTypeArray
    from vtkmodules.vtkCommonDataModel import vtkCellArray

    out = vtkCellArray()
    out.SetData(numpy_to_vtkIdTypeArray(np.ascontiguousarray(offsets, dtype=np.int64), deep=True),
                numpy_to_vtkIdTypeArray(np.ascontiguousarray(conn, dtype=np.int64), deep=True))
    return out


def _array(name: str, values: np.ndarray):
    from vtkmodules.util.numpy_support import numpy_to_vtk

    values = np.asarray(values)
    if values.dtype == bool:
        values = values.astype(np.uint8)
    arr = numpy_to_vtk(np.ascontiguousarray(values.reshape(len(values), -1)), deep=True)
    arr.SetName(name)
    return arr


def _has_polyhedral_cells_api(grid) -> bool:
    """Whether ``grid`` takes all its polyhedra at once (``SetPolyhedralCells``, VTK >= 9.4)."""
    return hasattr(grid, "SetPolyhedralCells")


def write_vtu_vtk(path: PathLike, points: np.ndarray, cells: Mapping[str, np.ndarray],
                  polyhedra: Optional[Polyhedra] = None, point_data: Optional[Mapping[str, np.ndarray]] = None,
                  cell_data: Optional[Mapping[str, np.ndarray]] = None) -> None:
    """Write points, fixed-size cells and polyhedra as a ``.vtu`` (binary, zlib-compressed).

    Args:
        path: the file to write (replaced; atomicity is the caller's, see
            :func:`meshshard.io.write_vtu`).
        points: float [N, 2] or [N, 3] (a zero z is added to 2-D points).
        cells: dict cell type -> int [n, k] in VTK node order (as :func:`meshshard.io.read_vtk`
            gives them).
        polyhedra: optional polyhedral cells, written after ``cells``.
        point_data: name -> [N] or [N, C] arrays.
        cell_data: name -> arrays with one row per cell, ``cells`` in dict order then the polyhedra.

    Raises:
        ImportError: the ``vtk`` package is missing (install ``meshshard[vtk]``).
        ValueError: a field with the wrong number of rows, or a cell type VTK has no id for.
    """
    require("vtk", "writing polyhedral cells to .vtu")
    from vtkmodules.util.numpy_support import numpy_to_vtk
    from vtkmodules.vtkCommonCore import vtkIdList, vtkPoints
    from vtkmodules.vtkCommonDataModel import vtkUnstructuredGrid
    from vtkmodules.vtkIOXML import vtkXMLUnstructuredGridWriter

    points = np.asarray(points, dtype=np.float64)
    if points.shape[1] == 2:
        points = np.concatenate([points, np.zeros((len(points), 1))], axis=1)
    grid = vtkUnstructuredGrid()
    pts = vtkPoints()
    pts.SetData(numpy_to_vtk(np.ascontiguousarray(points), deep=True))
    grid.SetPoints(pts)

    types, sizes, conns = [], [], []
    for t, c in cells.items():
        c = np.asarray(c, dtype=np.int64)
        types.append(np.full(len(c), _vtk_type(t), dtype=np.uint8))
        sizes.append(np.full(len(c), c.shape[1], dtype=np.int64))
        conns.append(c.reshape(-1))
    n_fixed = sum(len(t) for t in types)
    poly = polyhedra if polyhedra is not None and polyhedra.num_cells else None
    if poly is not None:
        cell, node = poly.cell_nodes()
        types.append(np.full(poly.num_cells, VTK_POLYHEDRON, dtype=np.uint8))
        sizes.append(np.bincount(cell, minlength=poly.num_cells).astype(np.int64))
        conns.append(node)
    types_np = np.concatenate(types) if types else np.empty(0, np.uint8)
    offsets = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]) if sizes else np.zeros(1, np.int64)
    conn = np.concatenate(conns) if conns else np.empty(0, np.int64)
    type_array = numpy_to_vtk(types_np, deep=True, array_type=3)  # VTK_UNSIGNED_CHAR
    if poly is None:
        grid.SetCells(type_array, _cell_array(offsets, conn))
    elif _has_polyhedral_cells_api(grid):
        nf = np.diff(poly.cell_offsets)
        locations = np.concatenate([np.zeros(n_fixed + 1, np.int64), np.cumsum(nf)])
        grid.SetPolyhedralCells(type_array, _cell_array(offsets, conn),
                                _cell_array(locations, np.arange(poly.num_faces, dtype=np.int64)),
                                _cell_array(poly.face_offsets, poly.face_nodes))
    else:  # every VTK 9: one cell at a time, polyhedra by their face streams
        stream, soff = poly.vtk_face_stream()
        grid.Allocate(len(types_np))
        ids = vtkIdList()
        for i in range(len(types_np)):
            row = conn[offsets[i]:offsets[i + 1]] if i < n_fixed else stream[soff[i - n_fixed]:soff[i - n_fixed + 1]]
            ids.Reset()
            for v in row.tolist():
                ids.InsertNextId(v)
            grid.InsertNextCell(int(types_np[i]), ids)

    for name, values in (point_data or {}).items():
        if len(values) != len(points):
            raise ValueError(f"point field {name!r} has {len(values)} rows, the mesh {len(points)} points")
        grid.GetPointData().AddArray(_array(name, values))
    for name, values in (cell_data or {}).items():
        if len(values) != len(types_np):
            raise ValueError(f"cell field {name!r} has {len(values)} rows, the mesh {len(types_np)} cells")
        grid.GetCellData().AddArray(_array(name, values))
    writer = vtkXMLUnstructuredGridWriter()
    writer.SetFileName(os.fspath(path))
    writer.SetInputData(grid)
    writer.SetDataModeToBinary()
    writer.SetCompressorTypeToZLib()
    if not writer.Write():
        raise ValueError(f"vtk could not write {path}")
