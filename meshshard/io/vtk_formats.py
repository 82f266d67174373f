"""VTK's own formats through the ``vtk`` package (the optional extra ``meshshard[vtk]``).

Read here: ``.vtp`` surfaces, ``.pvtu`` / ``.pvtp`` pieces (merged), legacy ``.vtk`` polydata
(unstructured grids are read by meshio), ``.vtm`` multiblocks (blocks merged, each block a named
set), OpenFOAM cases (a ``.foam`` marker file or the case folder), EnSight ``.case`` files and
CGNS files (``.cgns``: zones, fields and boundary sections; see :mod:`meshshard.io.cgns`).
Point and cell data both come through; cell data of the volume cells becomes
:attr:`meshshard.io.Mesh.cell_data`.

Merging: the blocks of a multiblock and the pieces of a parallel file are concatenated, and a point
that several of them hold (piece borders, a patch's points on the internal mesh) is kept once:
matched by the global point id array when every part has one, else by exact coordinates. Cells
VTK marks as ghost duplicates (``vtkGhostType``) are dropped.

Polyhedra (``VTK_POLYHEDRON``: OpenFOAM's cells that are no hexahedron, prism, pyramid or
tetrahedron) are read from VTK's face streams into :attr:`meshshard.io.Mesh.polyhedra`
(:mod:`meshshard.io.polyhedra`), numbered after the fixed-size cells. The OpenFOAM reader is asked
not to decompose them (VTK 9.4 and later never do; before, ``DecomposePolyhedra`` is switched
off): decomposing would add a point at every polyhedron's centre.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

import numpy as np

from meshshard._optional import require
from meshshard.io.cell_edges import topological_dim
from meshshard.io.mesh import Mesh
from meshshard.io.polyhedra import POLYHEDRON, VTK_POLYHEDRON, Polyhedra, ragged_take

__all__ = ["VTK_SUFFIXES", "read_vtk", "is_openfoam_case", "vtk_cell_type_names"]

PathLike = Union[str, os.PathLike]

#: Suffixes read through the ``vtk`` package (legacy ``.vtk`` goes to it when meshio cannot read it).
VTK_SUFFIXES = (".vtp", ".pvtu", ".pvtp", ".vtm", ".foam", ".case", ".cgns")

# VTK cell type id -> meshio cell type name (fixed-size cells)
_VTK_TO_MESHIO = {
    1: "vertex", 3: "line", 5: "triangle", 8: "quad", 9: "quad", 10: "tetra", 11: "hexahedron", 12: "hexahedron",
    13: "wedge", 14: "pyramid", 21: "line3", 22: "triangle6", 23: "quad8", 24: "tetra10", 25: "hexahedron20",
    26: "wedge15", 27: "pyramid13", 28: "quad9", 29: "hexahedron27",
}
# VTK_PIXEL and VTK_VOXEL number their nodes along the axes: reorder to QUAD / HEXAHEDRON order
_REORDER = {8: [0, 1, 3, 2], 11: [0, 1, 3, 2, 4, 5, 7, 6]}
_POLYGON = 7
_UNSUPPORTED = {2: "poly vertex", 4: "poly line", 6: "triangle strip", 42: "polyhedron"}  # _Part takes polyhedra apart
_GHOST = "vtkGhostType"
_DUPLICATE_CELL = 1
_GLOBAL_ID_NAMES = ("GlobalPointIds", "GlobalNodeIds", "GlobalNodeId", "GlobalIds", "vtkGlobalIds")


def vtk_cell_type_names() -> Dict[int, str]:
    """VTK cell type id -> meshio cell type name, for the cell types :func:`read_vtk` converts
    (a VTK polygon of ``k`` nodes becomes ``polygon<k>``)."""
    return dict(_VTK_TO_MESHIO)


def is_openfoam_case(path: PathLike) -> bool:
    """Whether ``path`` is an OpenFOAM case: a ``.foam`` marker file, or a folder with ``system/controlDict``."""
    path = Path(path)
    if path.suffix.lower() == ".foam":
        return True
    return path.is_dir() and (path / "system" / "controlDict").is_file()


class _Part:
    """One dataset as numpy arrays: points, cells (with their original index), point and cell fields.

    ``points_of``: the index of an earlier part whose points (and point fields) this part's cells
    refer to (a CGNS boundary section shares its zone's points); its own are then not converted.
    """

    def __init__(self, ds, name: str, points_of: Optional[int] = None):
        from vtkmodules.util.numpy_support import vtk_to_numpy

        self.name = name
        self.points_of = points_of
        n = ds.GetNumberOfPoints()
        if points_of is None:
            self.points = vtk_to_numpy(ds.GetPoints().GetData()).astype(np.float64).reshape(n, 3) if n else \
                np.empty((0, 3))
            self.point_data = _fields(ds.GetPointData(), n)
            self.global_ids = self._global_ids(ds)
        else:
            self.points, self.point_data, self.global_ids = np.empty((0, 3)), {}, None
        types, offsets, conn = _cell_arrays(ds)
        self.cell_data = _fields(ds.GetCellData(), len(types))
        ghost = self.cell_data.pop(_GHOST, None)
        self.point_data.pop(_GHOST, None)
        keep = np.ones(len(types), dtype=bool) if ghost is None else (ghost.astype(np.int64) & _DUPLICATE_CELL) == 0
        poly = keep & (types == VTK_POLYHEDRON)
        self.cells: Dict[str, Tuple[np.ndarray, np.ndarray]] = _group_cells(types, offsets, conn, keep & ~poly, name)
        for t, (rows, _) in self.cells.items():
            if rows.size and (rows.min() < 0 or rows.max() >= n):
                bad = int(rows.max()) if rows.max() >= n else int(rows.min())
                raise ValueError(f"{name or 'dataset'}: a {t} cell refers to point {bad}, but there are {n} points")
        #: the polyhedra (node ids of this part) and their cell indices, or None
        self.polyhedra: Optional[Tuple[Polyhedra, np.ndarray]] = None
        if poly.any():
            idx = np.flatnonzero(poly)
            self.polyhedra = (_polyhedron_faces(ds, idx), idx)

    def _global_ids(self, ds) -> Optional[np.ndarray]:
        from vtkmodules.util.numpy_support import vtk_to_numpy

        arr = ds.GetPointData().GetGlobalIds()
        if arr is not None:
            self.point_data.pop(arr.GetName(), None)
            return vtk_to_numpy(arr).astype(np.int64).reshape(-1)
        for name in _GLOBAL_ID_NAMES:
            if name in self.point_data and self.point_data[name].ndim == 1 and \
                    np.issubdtype(self.point_data[name].dtype, np.integer):
                return self.point_data.pop(name).astype(np.int64)
        return None


def _polyhedron_faces(ds, idx: np.ndarray) -> Polyhedra:
    """The polyhedra ``idx`` of a ``vtkUnstructuredGrid`` from its face streams.

    Args:
        ds: the grid.
        idx: int array of the cell ids of its polyhedra (VTK type 42), in the order wanted.

    Returns:
        :class:`meshshard.io.polyhedra.Polyhedra`, node ids as the grid numbers its points.
    """
    from vtkmodules.util.numpy_support import vtk_to_numpy

    idx = np.asarray(idx, dtype=np.int64)
    if not hasattr(ds, "GetPolyhedronFaces"):  # VTK < 9.4: one face stream per cell
        return _polyhedron_faces_by_cell(ds, idx)
    faces, locations = ds.GetPolyhedronFaces(), ds.GetPolyhedronFaceLocations()
    face_off = vtk_to_numpy(faces.GetOffsetsArray()).astype(np.int64)
    face_conn = vtk_to_numpy(faces.GetConnectivityArray()).astype(np.int64)
    loc_off = vtk_to_numpy(locations.GetOffsetsArray()).astype(np.int64)
    loc_conn = vtk_to_numpy(locations.GetConnectivityArray()).astype(np.int64)
    at, nf = ragged_take(loc_off, idx)  # the face ids of every wanted cell, in order
    at, sizes = ragged_take(face_off, loc_conn[at])
    return Polyhedra(face_conn[at], np.concatenate([[0], np.cumsum(sizes)]), np.concatenate([[0], np.cumsum(nf)]))


def _polyhedron_faces_by_cell(ds, idx: np.ndarray) -> Polyhedra:
    """:func:`_polyhedron_faces` through ``GetFaceStream``, one cell at a time (every VTK 9)."""
    from vtkmodules.vtkCommonCore import vtkIdList

    ids, cells = vtkIdList(), []
    for c in idx.tolist():
        ds.GetFaceStream(c, ids)
        stream = [ids.GetId(i) for i in range(ids.GetNumberOfIds())]
        faces, at = [], 1
        for _ in range(stream[0]):
            faces.append(stream[at + 1:at + 1 + stream[at]])
            at += 1 + stream[at]
        cells.append(faces)
    return Polyhedra.from_faces(cells)


def _fields(data, rows: int) -> Dict[str, np.ndarray]:
    """Numeric arrays of a vtkPointData / vtkCellData with ``rows`` tuples, by name."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    out = {}
    for i in range(data.GetNumberOfArrays()):
        arr = data.GetArray(i)  # None for string / non-numeric arrays
        if arr is None or arr.GetNumberOfTuples() != rows:
            continue
        a = vtk_to_numpy(arr)
        out[arr.GetName() or f"array{i}"] = a.reshape(rows, -1) if a.ndim == 2 else a.reshape(rows)
    return out


def _cell_arrays(ds) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(VTK cell type per cell, offsets [n + 1], connectivity) of an unstructured grid or polydata."""
    from vtkmodules.util.numpy_support import vtk_to_numpy

    if ds.IsA("vtkUnstructuredGrid"):
        if ds.GetNumberOfCells() == 0:
            return np.empty(0, np.int64), np.zeros(1, np.int64), np.empty(0, np.int64)
        cells = ds.GetCells()
        try:
            types = ds.GetCellTypes()  # VTK >= 9.6: the type of every cell
        except TypeError:
            types = None
        if types is None or not types.IsA("vtkDataArray"):
            types = ds.GetCellTypesArray()
        return (vtk_to_numpy(types).astype(np.int64),
                vtk_to_numpy(cells.GetOffsetsArray()).astype(np.int64),
                vtk_to_numpy(cells.GetConnectivityArray()).astype(np.int64))
    if ds.IsA("vtkPolyData"):
        # polydata numbers its cells verts, lines, polys, strips
        types, offsets, conns, at = [], [np.zeros(1, np.int64)], [], 0
        for arr, kind in ((ds.GetVerts(), "vert"), (ds.GetLines(), "line"), (ds.GetPolys(), "poly"),
                          (ds.GetStrips(), "strip")):
            if arr is None or arr.GetNumberOfCells() == 0:
                continue
            off = vtk_to_numpy(arr.GetOffsetsArray()).astype(np.int64)
            size = np.diff(off)
            if kind == "vert":
                t = np.where(size == 1, 1, 2)
            elif kind == "line":
                t = np.where(size == 2, 3, 4)
            elif kind == "poly":
                t = np.select([size == 3, size == 4], [5, 9], _POLYGON)
            else:
                t = np.full(len(size), 6)
            types.append(t)
            offsets.append(off[1:] + at)
            conns.append(vtk_to_numpy(arr.GetConnectivityArray()).astype(np.int64))
            at += int(off[-1])
        if not types:
            return np.empty(0, np.int64), np.zeros(1, np.int64), np.empty(0, np.int64)
        return np.concatenate(types), np.concatenate(offsets), np.concatenate(conns)
    raise ValueError(f"VTK dataset type {ds.GetClassName()} is not supported (unstructured grids and polydata are)")


def _group_cells(types, offsets, conn, keep, name) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Cells grouped by meshio type (first-appearance order): type -> (connectivity [n, k], cell index)."""
    size = np.diff(offsets)
    bad = sorted({int(t) for t in np.unique(types[keep])} - set(_VTK_TO_MESHIO) - {_POLYGON})
    if bad:
        what = ", ".join(f"{_UNSUPPORTED.get(t, 'VTK cell type')} ({t})" for t in bad)
        raise ValueError(f"{name or 'dataset'} has cells of a type meshshard does not convert: {what}")
    out: Dict[str, Tuple[np.ndarray, np.ndarray]] = {}
    idx_all = np.flatnonzero(keep)
    if not len(idx_all):
        return out
    key = np.where(types[idx_all] == _POLYGON, -size[idx_all], types[idx_all])  # polygons by node count
    _, first = np.unique(key, return_index=True)
    for k in key[np.sort(first)]:
        idx = idx_all[key == k]
        vtk_type = _POLYGON if k < 0 else int(k)
        width = int(size[idx[0]])
        if vtk_type != _POLYGON and np.any(size[idx] != width):
            raise ValueError(f"{name or 'dataset'}: cells of VTK type {vtk_type} have differing node counts")
        rows = conn[offsets[idx][:, None] + np.arange(width)]
        if vtk_type in _REORDER:
            rows = rows[:, _REORDER[vtk_type]]
        ctype = f"polygon{width}" if vtk_type == _POLYGON else _VTK_TO_MESHIO[vtk_type]
        if ctype in out:  # PIXEL and QUAD, VOXEL and HEXAHEDRON share a type
            prev_rows, prev_idx = out[ctype]
            rows, idx = np.concatenate([prev_rows, rows]), np.concatenate([prev_idx, idx])
        out[ctype] = (rows, idx)
    return out


def _leaves(obj, name: str = "") -> List[Tuple[str, object]]:
    """The datasets of a (nested) multiblock with their names (``parent/child`` when a name repeats)."""
    if obj is None:
        return []
    if obj.IsA("vtkMultiBlockDataSet") or obj.IsA("vtkMultiPieceDataSet"):
        from vtkmodules.vtkCommonDataModel import vtkCompositeDataSet

        out = []
        for i in range(obj.GetNumberOfBlocks() if obj.IsA("vtkMultiBlockDataSet") else obj.GetNumberOfPieces()):
            child = obj.GetBlock(i) if obj.IsA("vtkMultiBlockDataSet") else obj.GetPiece(i)
            meta = obj.GetMetaData(i) if obj.HasMetaData(i) else None
            cname = meta.Get(vtkCompositeDataSet.NAME()) if meta is not None and meta.Has(vtkCompositeDataSet.NAME()) \
                else f"block{i}"
            out += _leaves(child, f"{name}/{cname}" if name else cname)
        return out
    if obj.IsA("vtkDataSet"):
        return [(name, obj)] if obj.GetNumberOfPoints() else []
    return []


def _read_dataobject(path: Path, time: Optional[float]):
    """Run the VTK reader of ``path`` and return (its output, the block names are sets)."""
    suffix = path.suffix.lower()
    if is_openfoam_case(path):
        from vtkmodules.vtkIOGeometry import vtkOpenFOAMReader

        reader = vtkOpenFOAMReader()
        marker = path if path.suffix.lower() == ".foam" else path / f"{path.name}.foam"
        if not (marker.parent / "system" / "controlDict").is_file():
            raise ValueError(f"{path}: not an OpenFOAM case (no system/controlDict beside it)")
        reader.SetFileName(str(marker))
        reader.SkipZeroTimeOff()  # time 0 is a time like any other here
        if hasattr(reader, "SetDecomposePolyhedra"):  # VTK < 9.4 could split polyhedra, adding centre points
            reader.SetDecomposePolyhedra(0)
        reader.UpdateInformation()
        reader.EnableAllPatchArrays()
        reader.EnableAllCellArrays()
        reader.EnableAllPointArrays()
        return _update_at(reader, time, path), True
    if suffix == ".case":
        from vtkmodules.vtkIOEnSight import vtkGenericEnSightReader

        reader = vtkGenericEnSightReader()
        reader.SetCaseFileName(str(path))
        reader.UpdateInformation()
        reader.ReadAllVariablesOn()
        return _update_at(reader, time, path), True
    if suffix in (".pvtu", ".pvtp"):
        return _read_pieces(path), False
    if suffix == ".vtm":
        from vtkmodules.vtkIOXML import vtkXMLMultiBlockDataReader

        reader = vtkXMLMultiBlockDataReader()
    elif suffix == ".vtp":
        from vtkmodules.vtkIOXML import vtkXMLPolyDataReader

        reader = vtkXMLPolyDataReader()
    elif suffix == ".vtu":
        from vtkmodules.vtkIOXML import vtkXMLUnstructuredGridReader

        reader = vtkXMLUnstructuredGridReader()
    elif suffix == ".vtk":
        from vtkmodules.vtkIOLegacy import vtkGenericDataObjectReader

        reader = vtkGenericDataObjectReader()
    else:
        raise ValueError(f"{path.suffix or '(no suffix)'} is not a format read through vtk ({' '.join(VTK_SUFFIXES)} .vtk)")
    reader.SetFileName(str(path))
    reader.Update()
    return reader.GetOutputDataObject(0), suffix == ".vtm"


def _update_at(reader, time: Optional[float], path: Path):
    """Update a time-aware reader at ``time`` (default: its last time) and return its output."""
    from vtkmodules.vtkCommonExecutionModel import vtkStreamingDemandDrivenPipeline

    info = reader.GetOutputInformation(0)
    key = vtkStreamingDemandDrivenPipeline.TIME_STEPS()
    times = list(info.Get(key)) if info.Has(key) else []
    if time is not None:
        if times and not np.isclose(times, time).any():
            raise ValueError(f"{path}: no time {time}; the case has times {times}")
        reader.UpdateTimeStep(float(time))
    elif times:
        reader.UpdateTimeStep(float(times[-1]))
    else:
        reader.Update()
    return reader.GetOutputDataObject(0)


def _read_pieces(path: Path) -> List[Tuple[str, object]]:
    """The pieces of a ``.pvtu`` / ``.pvtp``, each read by the serial reader, as (name, dataset)."""
    from vtkmodules.vtkIOXML import vtkXMLPolyDataReader, vtkXMLUnstructuredGridReader

    from meshshard.io.pieces import piece_sources

    out = []
    for piece in piece_sources(path):
        reader = vtkXMLUnstructuredGridReader() if path.suffix.lower() == ".pvtu" else vtkXMLPolyDataReader()
        reader.SetFileName(str(piece))
        reader.Update()
        out.append((piece.stem, reader.GetOutputDataObject(0)))
    return out


def read_vtk(path: PathLike, time: Optional[float] = None) -> Mesh:
    """Read a VTK format (see the module doc) into a :class:`Mesh`.

    Args:
        path: a ``.vtp .pvtu .pvtp .vtm .vtk .case .cgns`` file, a ``.foam`` marker file, or an
            OpenFOAM case folder.
        time: the time to read from a time-dependent source (OpenFOAM, EnSight, CGNS); default
            its last.

    Returns:
        :class:`Mesh`: float64 points (d = 2 when planar), volume ``cells`` (the highest
        dimension present; a surface's polygons give their edge graph), ``polyhedra`` (VTK's
        polyhedral cells, numbered after ``cells``), ``boundary_cells``, one
        cell set per block of a multiblock (OpenFOAM patches, EnSight parts, ``.vtm`` block names,
        CGNS boundary sections and, when there are several, zones),
        ``point_data``, ``cell_data`` of the volume cells (OpenFOAM's cell fields; its point
        fields are VTK's interpolation of them), and for a multiblock of several volume
        blocks the integer cell field ``block`` (its position among the blocks; names in the sets).

    Raises:
        ImportError: the ``vtk`` package is missing (install ``meshshard[vtk]``).
        FileNotFoundError: the file or a piece it names does not exist.
        ValueError: the file cannot be read or holds cells meshshard does not convert.
    """
    require("vtk", f"reading {Path(path).name}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"mesh file not found: {path}")
    from vtkmodules.vtkCommonCore import vtkObject

    if path.suffix.lower() == ".cgns":
        from meshshard.io.cgns import read_cgns_parts

        return _merge(read_cgns_parts(path, time), path, True)
    vtkObject.GlobalWarningDisplayOff()  # VTK reports read errors on stderr; we raise them instead
    try:
        out, blocks_are_sets = _read_dataobject(path, time)
    finally:
        vtkObject.GlobalWarningDisplayOn()
    leaves = out if isinstance(out, list) else _leaves(out)
    if not leaves:
        raise ValueError(f"cannot read {path} through vtk: it holds no points (not a valid file, or empty)")
    if is_openfoam_case(path):
        leaves = [(_patch_name(name), ds) for name, ds in leaves]
    parts = [_Part(ds, name) for name, ds in leaves]
    return _merge(parts, path, blocks_are_sets)


def _patch_name(block: str) -> str:
    """An OpenFOAM block's set name: the patch name (``boundary/inlet`` -> ``inlet``); the internal
    mesh (every cell) gets none."""
    if block == "internalMesh":
        return ""
    for prefix in ("boundary/", "patch/"):
        if block.startswith(prefix):
            return block[len(prefix):]
    return block


def _merge(parts: List[_Part], path: Path, blocks_are_sets: bool) -> Mesh:
    """One :class:`Mesh` from parts, each shared point once."""
    points = np.concatenate([p.points for p in parts])
    starts = np.cumsum([0] + [len(p.points) for p in parts])
    owners = [p for p in parts if p.points_of is None]
    offset = [starts[i if p.points_of is None else p.points_of] for i, p in enumerate(parts)]
    if len(owners) == 1:
        new_id = np.arange(len(points))
        first = new_id
    else:
        if all(p.global_ids is not None for p in owners):
            key = np.concatenate([p.global_ids for p in owners])
            _, first, inv = np.unique(key, return_index=True, return_inverse=True)
        else:
            _, first, inv = np.unique(points, axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
        # number the kept points in the order they first appear
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        new_id = rank[inv]
        first = first[order]
    points = points[first]
    point_data = _merged_point_data(parts, new_id, starts, len(points), path)

    # cells: per meshio type, rows from every part in part order, node ids renumbered
    by_type: Dict[str, List[Tuple[int, np.ndarray, np.ndarray]]] = {}
    for i, p in enumerate(parts):
        for t, (rows, idx) in p.cells.items():
            by_type.setdefault(t, []).append((i, new_id[rows + offset[i]], idx))
    poly_parts = [(i, p.polyhedra) for i, p in enumerate(parts) if p.polyhedra is not None]
    dims = {t: topological_dim(t) for t in by_type}
    top = max([d for d in dims.values() if d >= 1] + ([3] if poly_parts else []), default=None)
    cells, boundary, sets = {}, {}, {}
    cell_parts: List[Tuple[int, np.ndarray]] = []  # (part, original cell index) of every volume cell in order
    for t, chunks in by_type.items():
        target = cells if top is not None and dims[t] == top else boundary
        target[t] = np.concatenate([c for _, c, _ in chunks])
        at = 0
        for i, c, idx in chunks:
            if blocks_are_sets and parts[i].name:
                sets.setdefault(parts[i].name, {}).setdefault(t, []).append(np.arange(at, at + len(c)))
            if target is cells:
                cell_parts.append((i, idx))
            at += len(c)
    polyhedra = None
    if poly_parts:  # numbered after the fixed-size cells, part after part
        own = [i if parts[i].points_of is None else parts[i].points_of for i, _ in poly_parts]  # whose points
        polyhedra = Polyhedra.concatenate([ph.renumbered(new_id[starts[o]:starts[o + 1]])
                                           for o, (_, (ph, _)) in zip(own, poly_parts)])
        at = 0
        for i, (ph, idx) in poly_parts:
            if blocks_are_sets and parts[i].name:
                sets.setdefault(parts[i].name, {}).setdefault(POLYHEDRON, []).append(np.arange(at, at + len(idx)))
            cell_parts.append((i, idx))
            at += len(idx)
    cell_data = _volume_cell_data(parts, cell_parts, path)
    volume_parts = sorted({i for i, _ in cell_parts})
    if blocks_are_sets and len(volume_parts) > 1 and "block" not in cell_data:
        cell_data["block"] = np.concatenate([np.full(len(idx), volume_parts.index(i), dtype=np.int64)
                                             for i, idx in cell_parts])
    cell_sets = {name: {t: np.concatenate(v) for t, v in per.items()} for name, per in sets.items()}

    if top is not None and top <= 2 and not points[:, 2].any():
        points = points[:, :2]  # planar: VTK always stores three coordinates
    try:
        return Mesh(points, cells=cells, boundary_cells=boundary, cell_sets=cell_sets, point_data=point_data,
                    source=path, cell_data=cell_data, polyhedra=polyhedra)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot read {path} through vtk: {exc}") from exc


def _merged_point_data(parts: List[_Part], new_id, starts, n: int, path: Path) -> Dict[str, np.ndarray]:
    """Point fields of the merged points; a point held by several parts takes the first part's value.

    A field is kept when the parts that have it cover every merged point (a boundary block without
    the volume block's field takes it from the volume block); a warning names the others."""
    names: List[str] = []
    for p in parts:
        names += [k for k in p.point_data if k not in names]
    out, dropped = {}, []
    for k in names:
        have = [i for i, p in enumerate(parts) if k in p.point_data]
        if len({parts[i].point_data[k].shape[1:] for i in have}) > 1:
            dropped.append(k)
            continue
        arrays = [parts[i].point_data[k] for i in have]
        values = np.empty((n,) + arrays[0].shape[1:], dtype=np.result_type(*arrays))
        covered = np.zeros(n, dtype=bool)
        for i, arr in zip(reversed(have), reversed(arrays)):  # earlier parts written last: they win
            ids = new_id[starts[i]:starts[i + 1]]
            values[ids] = arr
            covered[ids] = True
        if covered.all():
            out[k] = values
        else:
            dropped.append(k)
    if dropped:
        warnings.warn(f"{path.name}: point fields {dropped} are missing on some points (not on every block/piece, "
                      "or differing in shape between them); dropped", stacklevel=4)
    return out


def _merged_fields(fields: List[Dict[str, np.ndarray]], path: Path, what: str) -> List[str]:
    """Names of the fields every part has (with one column count); a warning names the rest."""
    common = set(fields[0]).intersection(*fields[1:]) if fields else set()
    common = {k for k in common if len({f[k].shape[1:] for f in fields}) == 1}
    dropped = sorted(set().union(*fields) - common) if fields else []
    if dropped:
        warnings.warn(f"{path.name}: {what} fields {dropped} are not on every block/piece (or differ in shape "
                      "between them); dropped", stacklevel=4)
    return sorted(common, key=list(fields[0]).index)


def _volume_cell_data(parts: List[_Part], cell_parts, path: Path) -> Dict[str, np.ndarray]:
    """Cell fields of the volume cells, in the mesh's cell order."""
    used = sorted({i for i, _ in cell_parts})
    if not used:
        return {}
    names = _merged_fields([parts[i].cell_data for i in used], path, "cell")
    return {k: np.concatenate([parts[i].cell_data[k][idx] for i, idx in cell_parts]) for k in names}
