"""Parallel VTK files piece by piece: read a chosen subset of the pieces of a ``.pvtu`` / ``.pvtp``
(:func:`read_pieces`), write one ``.vtu`` piece (:func:`write_piece`) and the ``.pvtu`` master that
names the pieces (:func:`write_pvtu`), through the ``vtk`` package (the extra ``meshshard[vtk]``).

A reader of several pieces gets them concatenated as they are: a point on a piece border appears
once per piece that holds it. Each point carries a key that names it across pieces (the global
point id array when every piece read has one, else its coordinates), so a distributed step
(:func:`meshshard.ops.read_pieces_distributed`) can number every point once without any process
holding the whole mesh. Cells that VTK marks as ghost duplicates (``vtkGhostType``) are dropped.

Every write is atomic (:func:`meshshard._fileutil.atomic_path`).
"""
from __future__ import annotations

import dataclasses
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from meshshard._fileutil import atomic_path
from meshshard._optional import require

__all__ = ["PIECE_SUFFIXES", "PieceSet", "piece_sources", "read_pieces", "write_piece", "write_pvtu",
           "pieces_of_rank"]

PathLike = Union[str, os.PathLike]

#: parallel VTK formats whose pieces :func:`read_pieces` reads one by one
PIECE_SUFFIXES = (".pvtu", ".pvtp")

# numpy dtype -> VTK XML type name
_XML_TYPES = {"float32": "Float32", "float64": "Float64", "int8": "Int8", "uint8": "UInt8", "int16": "Int16",
              "uint16": "UInt16", "int32": "Int32", "uint32": "UInt32", "int64": "Int64", "uint64": "UInt64"}


def piece_sources(path: PathLike) -> List[Path]:
    """The piece files a ``.pvtu`` / ``.pvtp`` master names, in piece order.

    Args:
        path: the master file.

    Returns:
        the pieces' paths (relative names resolved against the master's folder).

    Raises:
        FileNotFoundError: the master or a piece it names does not exist.
        ValueError: not a ``.pvtu`` / ``.pvtp``, not valid XML, or no ``<Piece Source=...>``.
    """
    path = Path(path)
    if path.suffix.lower() not in PIECE_SUFFIXES:
        raise ValueError(f"{path}: not a parallel VTK file ({' '.join(PIECE_SUFFIXES)})")
    if not path.is_file():
        raise FileNotFoundError(f"mesh file not found: {path}")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise ValueError(f"{path}: not a valid XML file ({exc})") from exc
    sources = [p.get("Source") for p in root.iter("Piece") if p.get("Source")]
    if not sources:
        raise ValueError(f"{path}: names no pieces (no <Piece Source=...>)")
    out = []
    for src in sources:
        piece = path.parent / src
        if not piece.is_file():
            raise FileNotFoundError(f"{path}: piece {src} not found at {piece}")
        out.append(piece)
    return out


def pieces_of_rank(num_pieces: int, world: int, rank: int) -> List[int]:
    """The pieces rank ``rank`` of ``world`` reads: a contiguous block, the counts differing by at most one.

    Args:
        num_pieces: pieces of the file (``>= world``).
        world: number of ranks.
        rank: this rank.

    Returns:
        piece indices ``[rank * K // W, (rank + 1) * K // W)``.
    """
    if num_pieces < world:
        raise ValueError(f"{num_pieces} pieces cannot give each of {world} ranks at least one")
    return list(range(rank * num_pieces // world, (rank + 1) * num_pieces // world))


@dataclasses.dataclass
class PieceSet:
    r"""Some pieces of a parallel VTK file, concatenated (border points repeated, once per piece).

    Attributes:
        source: the master file.
        pieces: the piece indices read, in order.
        points: ``float64 [n, 3]`` every point of every piece read (VTK stores three coordinates).
        global_ids: ``int64 [n]`` the global point id array, or ``None`` when some piece read has none.
        point_data: name -> ``[n, ...]`` point fields that every piece read has (one shape per field).
        cell_types: ``int64 [m]`` VTK cell type of every cell (ghost duplicates dropped).
        cell_offsets: ``int64 [m + 1]`` start of every cell in ``cell_conn``.
        cell_conn: ``int64 [cell_offsets[-1]]`` point rows (into ``points``) of the cells.
        cell_data: name -> ``[m, ...]`` cell fields that every piece read has.
        dropped: names of fields some piece read lacks (or holds with another shape).
    """

    source: Path
    pieces: List[int]
    points: np.ndarray
    global_ids: Optional[np.ndarray]
    point_data: Dict[str, np.ndarray]
    cell_types: np.ndarray
    cell_offsets: np.ndarray
    cell_conn: np.ndarray
    cell_data: Dict[str, np.ndarray]
    dropped: List[str]

    @property
    def num_points(self) -> int:
        """Points ``n`` (border points counted once per piece)."""
        return int(self.points.shape[0])

    def cells(self) -> Dict[str, np.ndarray]:
        """The cells grouped by meshio type (first-appearance order): type -> ``int64 [n_type, k]`` point rows."""
        from meshshard.io.polyhedra import VTK_POLYHEDRON
        from meshshard.io.vtk_formats import _group_cells

        if (self.cell_types == VTK_POLYHEDRON).any():
            raise ValueError(f"{self.source}: its pieces hold polyhedral cells, which piece-wise reading does not "
                             "take yet: read the file whole (meshshard.read_mesh, or fewer pieces than ranks)")
        keep = np.ones(len(self.cell_types), dtype=bool)
        return {t: rows for t, (rows, _) in _group_cells(self.cell_types, self.cell_offsets, self.cell_conn, keep,
                                                         str(self.source)).items()}


def _common(fields: List[Dict[str, np.ndarray]]) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """Fields every part has with one column shape, concatenated; the names of the rest."""
    if not fields:
        return {}, []
    names = [k for k in fields[0] if all(k in f and f[k].shape[1:] == fields[0][k].shape[1:] for f in fields)]
    dropped = sorted(set().union(*fields) - set(names))
    return {k: np.concatenate([f[k] for f in fields]) for k in names}, dropped


def read_pieces(path: PathLike, pieces: Sequence[int]) -> PieceSet:
    """Read the pieces ``pieces`` of a ``.pvtu`` / ``.pvtp`` (the others are not opened).

    Args:
        path: the master file.
        pieces: indices of the pieces to read (into :func:`piece_sources`), at least one.

    Returns:
        :class:`PieceSet`: the pieces concatenated in the order given, each piece's point and cell
        rows after the previous piece's.

    Raises:
        ImportError: the ``vtk`` package is missing (install ``meshshard[vtk]``).
        FileNotFoundError: the master or a piece does not exist.
        ValueError: a bad index, an unreadable piece, or cells meshshard does not convert.
    """
    require("vtk", f"reading {Path(path).name}")
    from vtkmodules.util.numpy_support import vtk_to_numpy
    from vtkmodules.vtkCommonCore import vtkObject
    from vtkmodules.vtkIOXML import vtkXMLPolyDataReader, vtkXMLUnstructuredGridReader

    from meshshard.io.vtk_formats import _DUPLICATE_CELL, _GHOST, _GLOBAL_ID_NAMES, _cell_arrays, _fields

    path = Path(path)
    sources = piece_sources(path)
    pieces = [int(p) for p in pieces]
    if not pieces:
        raise ValueError(f"{path}: no pieces to read")
    bad = [p for p in pieces if not 0 <= p < len(sources)]
    if bad:
        raise ValueError(f"{path}: has pieces 0..{len(sources) - 1}, asked for {bad}")
    points, ids, pdata, types, offsets, conns, cdata = [], [], [], [], [], [], []
    at = 0
    vtkObject.GlobalWarningDisplayOff()
    try:
        for p in pieces:
            reader = vtkXMLUnstructuredGridReader() if path.suffix.lower() == ".pvtu" else vtkXMLPolyDataReader()
            reader.SetFileName(str(sources[p]))
            reader.Update()
            ds = reader.GetOutputDataObject(0)
            n = ds.GetNumberOfPoints() if ds is not None else 0
            if ds is None or (n == 0 and ds.GetNumberOfCells() == 0 and sources[p].stat().st_size == 0):
                raise ValueError(f"{path}: cannot read piece {p} ({sources[p]})")
            pts = vtk_to_numpy(ds.GetPoints().GetData()).astype(np.float64).reshape(n, 3) if n else np.empty((0, 3))
            pd = _fields(ds.GetPointData(), n)
            pd.pop(_GHOST, None)
            gid = None
            arr = ds.GetPointData().GetGlobalIds()
            if arr is not None:
                pd.pop(arr.GetName(), None)
                gid = vtk_to_numpy(arr).astype(np.int64).reshape(-1)
            else:
                for name in _GLOBAL_ID_NAMES:
                    if name in pd and pd[name].ndim == 1 and np.issubdtype(pd[name].dtype, np.integer):
                        gid = pd.pop(name).astype(np.int64)
                        break
            t, off, conn = _cell_arrays(ds)
            cd = _fields(ds.GetCellData(), len(t))
            ghost = cd.pop(_GHOST, None)
            keep = np.ones(len(t), dtype=bool) if ghost is None else (ghost.astype(np.int64) & _DUPLICATE_CELL) == 0
            if not keep.all():
                size = np.diff(off)[keep]
                rows = np.repeat(off[:-1][keep], size) + (np.arange(int(size.sum())) - np.repeat(
                    np.cumsum(size) - size, size))
                conn, t = conn[rows], t[keep]
                off = np.concatenate([[0], np.cumsum(size)])
                cd = {k: v[keep] for k, v in cd.items()}
            points.append(pts)
            ids.append(gid)
            pdata.append(pd)
            types.append(t)
            offsets.append(off[1:] + (int(offsets[-1][-1]) if offsets else 0))
            conns.append(conn + at)
            cdata.append(cd)
            at += n
    finally:
        vtkObject.GlobalWarningDisplayOn()
    point_data, dropped_p = _common(pdata)
    cell_data, dropped_c = _common(cdata)
    return PieceSet(
        source=path, pieces=pieces, points=np.concatenate(points),
        global_ids=None if any(g is None for g in ids) else np.concatenate(ids),
        point_data=point_data, cell_types=np.concatenate(types),
        cell_offsets=np.concatenate([np.zeros(1, np.int64)] + offsets), cell_conn=np.concatenate(conns),
        cell_data=cell_data, dropped=dropped_p + dropped_c)


def _vtk_array(name: str, values: np.ndarray):
    from vtkmodules.util.numpy_support import numpy_to_vtk

    values = np.asarray(values)
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)
    if values.dtype.name not in _XML_TYPES:
        raise ValueError(f"field {name!r} has dtype {values.dtype}, which a VTK file cannot hold")
    arr = numpy_to_vtk(np.ascontiguousarray(values.reshape(len(values), -1)), deep=True)
    arr.SetName(name)
    return arr


def write_piece(path: PathLike, points: np.ndarray, cell_types: np.ndarray, cell_offsets: np.ndarray,
                cell_conn: np.ndarray, point_data: Optional[Mapping[str, np.ndarray]] = None,
                cell_data: Optional[Mapping[str, np.ndarray]] = None) -> Path:
    """Write one piece as a ``.vtu`` (an unstructured grid), atomically.

    Args:
        path: the file to write (replaced if it exists).
        points: ``[n, 2]`` or ``[n, 3]`` coordinates (a zero z is added to 2D points).
        cell_types: ``[m]`` VTK cell types; cell_offsets ``[m + 1]``; cell_conn the point rows.
        point_data: name -> ``[n, ...]`` point fields (bool written as uint8).
        cell_data: name -> ``[m, ...]`` cell fields.

    Returns:
        ``path``.
    """
    require("vtk", f"writing {Path(path).name}")
    from vtkmodules.util.numpy_support import numpy_to_vtk, numpy_to_vtkIdTypeArray
    from vtkmodules.vtkCommonCore import vtkPoints
    from vtkmodules.vtkCommonDataModel import vtkCellArray, vtkUnstructuredGrid
    from vtkmodules.vtkIOXML import vtkXMLUnstructuredGridWriter

    path = Path(path)
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise ValueError(f"points must have shape [n, 2] or [n, 3], got {pts.shape}")
    if pts.shape[1] == 2:
        pts = np.concatenate([pts, np.zeros((len(pts), 1))], axis=1)
    n, m = len(pts), len(cell_types)
    ug = vtkUnstructuredGrid()
    vp = vtkPoints()
    vp.SetData(numpy_to_vtk(np.ascontiguousarray(pts), deep=True))
    ug.SetPoints(vp)
    ca = vtkCellArray()
    ca.SetData(numpy_to_vtkIdTypeArray(np.ascontiguousarray(cell_offsets, dtype=np.int64), deep=True),
               numpy_to_vtkIdTypeArray(np.ascontiguousarray(cell_conn, dtype=np.int64), deep=True))
    ug.SetCells(numpy_to_vtk(np.ascontiguousarray(cell_types, dtype=np.uint8), deep=True), ca)
    for what, fields, rows, data in (("point", point_data, n, ug.GetPointData()),
                                     ("cell", cell_data, m, ug.GetCellData())):
        for name, values in (fields or {}).items():
            if len(values) != rows:
                raise ValueError(f"{what} field {name!r} has {len(values)} rows, the piece {rows} {what}s")
            data.AddArray(_vtk_array(name, values))
    with atomic_path(path) as tmp:
        w = vtkXMLUnstructuredGridWriter()
        w.SetFileName(str(tmp))
        w.SetInputData(ug)
        if w.Write() != 1:
            raise OSError(f"vtk could not write {path}")
    return path


def _descriptions(fields: Mapping[str, np.ndarray]) -> str:
    rows = []
    for name, values in fields.items():
        values = np.asarray(values)
        dtype = "uint8" if values.dtype == np.bool_ else values.dtype.name
        comps = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
        rows.append(f'      <PDataArray type="{_XML_TYPES[dtype]}" Name={_quote(name)} NumberOfComponents="{comps}"/>')
    return "\n".join(rows)


def _quote(s: str) -> str:
    from xml.sax.saxutils import quoteattr

    return quoteattr(str(s))


def write_pvtu(path: PathLike, pieces: Sequence[PathLike], point_data: Optional[Mapping[str, np.ndarray]] = None,
               cell_data: Optional[Mapping[str, np.ndarray]] = None) -> Path:
    """Write the ``.pvtu`` master naming ``pieces`` (written by :func:`write_piece`), atomically.

    ParaView and VTK's ``vtkXMLPUnstructuredGridReader`` open it as one dataset;
    :func:`meshshard.io.read_mesh` merges its pieces (points shared by pieces kept once).

    Args:
        path: the ``.pvtu`` to write.
        pieces: the piece files, relative to ``path``'s folder (or absolute below it).
        point_data, cell_data: the fields of one piece (only their dtypes and column counts are
            used: every piece must hold the same fields).

    Returns:
        ``path``.
    """
    path = Path(path)
    if not pieces:
        raise ValueError("write_pvtu: no pieces to name")
    rows = []
    for p in pieces:
        p = Path(p)
        if p.is_absolute():
            p = p.relative_to(path.parent.resolve())
        rows.append(f"    <Piece Source={_quote(p.as_posix())}/>")
    text = ('<?xml version="1.0"?>\n'
            '<VTKFile type="PUnstructuredGrid" version="1.0" byte_order="LittleEndian" header_type="UInt64">\n'
            '  <PUnstructuredGrid GhostLevel="0">\n'
            f'    <PPointData>\n{_descriptions(point_data or {})}\n    </PPointData>\n'
            f'    <PCellData>\n{_descriptions(cell_data or {})}\n    </PCellData>\n'
            '    <PPoints>\n      <PDataArray type="Float64" Name="Points" NumberOfComponents="3"/>\n    </PPoints>\n'
            + "\n".join(rows) + "\n  </PUnstructuredGrid>\n</VTKFile>\n")
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path
