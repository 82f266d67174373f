"""CGNS/HDF5 files written with h5py the way the CGNS mid-level library lays them out (test-only).

The HDF5 mapping of the CGNS standard: every node is an HDF5 group with the attributes ``name``
(33 bytes), ``label`` (33 bytes), ``type`` (3 bytes: ``MT I4 I8 R4 R8 C1``) and ``flags``
(int32, 1: children kept in creation order), and its value in a dataset named ``" data"``;
character data (``C1``) is stored as int8; arrays are stored with their CGNS (Fortran-order)
dimensions reversed. The root group carries ``" format"``, ``" hdf5version"`` and the
``CGNSLibraryVersion`` node.

Unstructured zones are laid out as solvers and mesh tools export them: one ``Elements_t``
section per volume element type, then one section per boundary patch (faces, or edges in 2-D),
element numbers running on across the sections; ``ZoneBC_t`` with one ``BC_t`` per patch pointing
at its section by ``PointRange`` with ``GridLocation`` ``FaceCenter`` (``EdgeCenter`` in 2-D),
optionally a ``BC_t`` by a vertex ``PointList``; fields in ``FlowSolution_t`` nodes at
``Vertex`` and ``CellCenter``; several times by ``BaseIterativeData_t`` (``TimeValues``) and
``ZoneIterativeData_t`` (``FlowSolutionPointers``).
"""
import itertools
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import h5py
import numpy as np

__all__ = ["CGNS_TYPES", "mixed_block", "write_cgns", "write_polyhedral_cgns", "write_structured_cgns"]

#: meshio cell type -> CGNS ElementType_t value (node order is VTK's / meshio's for these types)
CGNS_TYPES = {"line": 3, "triangle": 5, "quad": 7, "tetra": 10, "pyramid": 12, "wedge": 14, "hexahedron": 17}
_DIM = {"line": 1, "triangle": 2, "quad": 2, "tetra": 3, "pyramid": 3, "wedge": 3, "hexahedron": 3}


def _node(parent, name: str, label: str, dtype: str = "MT", data=None):
    g = parent.create_group(name, track_order=True)
    g.attrs.create("name", np.bytes_(name), dtype="S33")
    g.attrs.create("label", np.bytes_(label), dtype="S33")
    g.attrs.create("type", np.bytes_(dtype), dtype="S3")
    g.attrs.create("flags", np.array([1], dtype=np.int32))
    if data is not None:
        g.create_dataset(" data", data=data)
    return g


def _chars(s: str) -> np.ndarray:
    return np.frombuffer(s.encode(), dtype=np.int8)


def _names(names: Sequence[str]) -> np.ndarray:
    """A C1 array of 32-character names, CGNS dims [32, n] -> HDF5 shape (n, 32)."""
    return np.stack([_chars(n.ljust(32)) for n in names])


def _root(f, cell_dim: int, phys_dim: int, base: str = "Base"):
    f.attrs.create("name", np.bytes_("HDF5 MotherNode"), dtype="S33")
    f.attrs.create("label", np.bytes_("Root Node of HDF5 File"), dtype="S33")
    f.attrs.create("type", np.bytes_("MT"), dtype="S3")
    f.create_dataset(" format", data=_chars("IEEE_LITTLE_32"))
    f.create_dataset(" hdf5version", data=_chars("HDF5 Version 1.10.7".ljust(32, "\0")))
    _node(f, "CGNSLibraryVersion", "CGNSLibraryVersion_t", "R4", np.array([4.2], dtype=np.float32))
    return _node(f, base, "CGNSBase_t", "I4", np.array([cell_dim, phys_dim], dtype=np.int32))


def _solution(zone, name: str, location: str, fields: Dict[str, np.ndarray]):
    sol = _node(zone, name, "FlowSolution_t")
    _node(sol, "GridLocation", "GridLocation_t", "C1", _chars(location))
    for k, v in fields.items():
        v = np.asarray(v, dtype=np.float64)
        if v.ndim == 2:  # a vector is one scalar array per component, named <name>X, <name>Y, <name>Z
            for i, c in enumerate("XYZ"[:v.shape[1]]):
                _node(sol, f"{k}{c}", "DataArray_t", "R8", v[:, i].copy())
        else:
            _node(sol, k, "DataArray_t", "R8", v)


def write_cgns(path: Path, zones: List[dict], cell_dim: int = 3, phys_dim: int = 3,
               times: Optional[Sequence[float]] = None) -> Path:
    """Write unstructured zones into one base.

    Args:
        path: the ``.cgns`` file to write.
        zones: each a dict with ``name``, ``points`` [N, phys_dim], ``sections`` (a list of
            ``(name, meshio type, connectivity [n, k] with 0-based point ids)``: volume sections
            first, then one per boundary patch), and optionally ``bcs`` (a list of
            ``(name, BCType, location, ids)``: location ``"FaceCenter"`` / ``"EdgeCenter"`` with
            ``ids`` the section name it covers, or ``"Vertex"`` with ``ids`` 0-based point ids),
            ``point_fields`` / ``cell_fields`` (name -> values [n] or [n, 3], a vector written
            as the arrays ``<name>X <name>Y <name>Z``; with ``times``: a list of such dicts, one
            per time).
        cell_dim, phys_dim: the base's cell and physical dimensions.
        times: the time values when the fields are given per time.

    Returns:
        ``path``.
    """
    with h5py.File(path, "w", track_order=True) as f:
        base = _root(f, cell_dim, phys_dim)
        if times is not None:
            it = _node(base, "BaseIterativeData", "BaseIterativeData_t", "I4", np.array([len(times)], np.int32))
            _node(it, "TimeValues", "DataArray_t", "R8", np.asarray(times, dtype=np.float64))
            _node(it, "IterationValues", "DataArray_t", "I4", np.arange(1, len(times) + 1, dtype=np.int32))
        for z in zones:
            _zone(base, z, cell_dim, phys_dim, times)
    return Path(path)


def _zone(base, z: dict, cell_dim: int, phys_dim: int, times):
    pts = np.asarray(z["points"], dtype=np.float64)
    n_cells = sum(len(c) for _, t, c in z["sections"] if _DIM[t] == cell_dim)  # boundary elements not counted
    zone = _node(base, z["name"], "Zone_t", "I8", np.array([[len(pts)], [n_cells], [0]], dtype=np.int64))
    _node(zone, "ZoneType", "ZoneType_t", "C1", _chars("Unstructured"))
    if times is not None:
        zit = _node(zone, "ZoneIterativeData", "ZoneIterativeData_t")
        _node(zit, "FlowSolutionPointers", "DataArray_t", "C1",
              _names([f"FlowSolution{i}" for i in range(len(times))]))
        _node(zit, "FlowSolutionCellPointers", "DataArray_t", "C1",
              _names([f"FlowSolutionCell{i}" for i in range(len(times))]))
    gc = _node(zone, "GridCoordinates", "GridCoordinates_t")
    for k, c in enumerate("XYZ"[:phys_dim]):
        _node(gc, f"Coordinate{c}", "DataArray_t", "R8", pts[:, k].copy())
    ranges, at = {}, 0
    for name, ctype, conn in z["sections"]:
        conn = np.asarray(conn, dtype=np.int64)
        el = _node(zone, name, "Elements_t", "I4", np.array([CGNS_TYPES[ctype], 0], dtype=np.int32))
        ranges[name] = (at + 1, at + len(conn))
        _node(el, "ElementRange", "IndexRange_t", "I8", np.array(ranges[name], dtype=np.int64))
        _node(el, "ElementConnectivity", "DataArray_t", "I8", (conn + 1).reshape(-1))
        at += len(conn)
    if z.get("bcs"):
        zbc = _node(zone, "ZoneBC", "ZoneBC_t")
        for name, bctype, location, ids in z["bcs"]:
            bc = _node(zbc, name, "BC_t", "C1", _chars(bctype))
            _node(bc, "GridLocation", "GridLocation_t", "C1", _chars(location))
            if location == "Vertex":
                _node(bc, "PointList", "IndexArray_t", "I8", (np.asarray(ids, np.int64) + 1).reshape(-1, 1))
            else:
                _node(bc, "PointRange", "IndexRange_t", "I8", np.array(ranges[ids], np.int64).reshape(2, 1))
    pf, cf = z.get("point_fields", {}), z.get("cell_fields", {})
    if times is None:
        if pf:
            _solution(zone, "FlowSolution", "Vertex", pf)
        if cf:
            _solution(zone, "FlowSolutionCell", "CellCenter", cf)
    else:
        for i in range(len(times)):
            _solution(zone, f"FlowSolution{i}", "Vertex", pf[i])
            _solution(zone, f"FlowSolutionCell{i}", "CellCenter", cf[i])


def write_structured_cgns(path: Path, points: np.ndarray) -> Path:
    """One structured zone of ``points`` [nk, nj, ni, 3] (i fastest)."""
    nk, nj, ni, _ = points.shape
    with h5py.File(path, "w", track_order=True) as f:
        base = _root(f, 3, 3)
        size = np.array([[ni, nj, nk], [ni - 1, nj - 1, nk - 1], [0, 0, 0]], dtype=np.int32)
        zone = _node(base, "Block", "Zone_t", "I4", size)
        _node(zone, "ZoneType", "ZoneType_t", "C1", _chars("Structured"))
        gc = _node(zone, "GridCoordinates", "GridCoordinates_t")
        for k, c in enumerate("XYZ"):
            _node(gc, f"Coordinate{c}", "DataArray_t", "R8", np.ascontiguousarray(points[..., k]))
    return Path(path)


def mixed_block(ny: int = 2, nz: int = 2, x0: float = 0.0) -> dict:
    """A 3 x ny x nz block of unit cubes starting at x = x0: hexahedra in the first column, two
    wedges per cube in the second, six tetrahedra per cube in the third (all positively oriented).

    Returns:
        dict with ``points`` [P, 3], ``hexahedron`` / ``wedge`` / ``tetra`` connectivity (0-based),
        ``inlet`` (the quads at x = x0) and ``outlet`` (the triangles at x = x0 + 3).
    """
    nx = 3
    pid = lambda i, j, k: i + (nx + 1) * (j + (ny + 1) * k)  # noqa: E731
    pts = np.array([(x0 + i, j, k) for k in range(nz + 1) for j in range(ny + 1) for i in range(nx + 1)], float)
    hexes, wedges, tets, inlet, outlet = [], [], [], [], []
    for k, j in itertools.product(range(nz), range(ny)):
        def c(a, b, d, i):
            return pid(i + a, j + b, k + d)
        hexes.append([c(0, 0, 0, 0), c(1, 0, 0, 0), c(1, 1, 0, 0), c(0, 1, 0, 0),
                      c(0, 0, 1, 0), c(1, 0, 1, 0), c(1, 1, 1, 0), c(0, 1, 1, 0)])
        wedges.append([c(0, 0, 0, 1), c(1, 0, 0, 1), c(1, 1, 0, 1), c(0, 0, 1, 1), c(1, 0, 1, 1), c(1, 1, 1, 1)])
        wedges.append([c(0, 0, 0, 1), c(1, 1, 0, 1), c(0, 1, 0, 1), c(0, 0, 1, 1), c(1, 1, 1, 1), c(0, 1, 1, 1)])
        for perm in itertools.permutations(range(3)):  # Kuhn's six tetrahedra along the main diagonal
            v, path = [0, 0, 0], [(0, 0, 0)]
            for ax in perm:
                v[ax] = 1
                path.append(tuple(v))
            tet = [c(a, b, d, 2) for a, b, d in path]
            if np.linalg.det(pts[tet[1:]] - pts[tet[0]]) < 0:
                tet[2], tet[3] = tet[3], tet[2]
            tets.append(tet)
        inlet.append([c(0, 0, 0, 0), c(0, 0, 1, 0), c(0, 1, 1, 0), c(0, 1, 0, 0)])
        outlet += [[c(1, 0, 0, 2), c(1, 1, 0, 2), c(1, 1, 1, 2)], [c(1, 0, 0, 2), c(1, 0, 1, 2), c(1, 1, 1, 2)]]
    return {"points": pts, "hexahedron": np.array(hexes), "wedge": np.array(wedges), "tetra": np.array(tets),
            "inlet": np.array(inlet), "outlet": np.array(outlet)}


def write_polyhedral_cgns(path: Path, points: np.ndarray, faces: List[List[int]], cells: List[List[int]]) -> Path:
    """One unstructured zone of polyhedra: an ``NGON_n`` section of ``faces`` (0-based point ids)
    and an ``NFACE_n`` section of ``cells`` (1-based signed face numbers), CGNS 4 offsets layout."""
    with h5py.File(path, "w", track_order=True) as f:
        base = _root(f, 3, 3)
        zone = _node(base, "Poly", "Zone_t", "I8", np.array([[len(points)], [len(cells)], [0]], dtype=np.int64))
        _node(zone, "ZoneType", "ZoneType_t", "C1", _chars("Unstructured"))
        gc = _node(zone, "GridCoordinates", "GridCoordinates_t")
        for k, c in enumerate("XYZ"):
            _node(gc, f"Coordinate{c}", "DataArray_t", "R8", np.asarray(points, np.float64)[:, k].copy())
        at = 0
        for name, etype, rows, shift in (("Faces", 22, faces, 1), ("Cells", 23, cells, 0)):
            el = _node(zone, name, "Elements_t", "I4", np.array([etype, 0], dtype=np.int32))
            _node(el, "ElementRange", "IndexRange_t", "I8", np.array([at + 1, at + len(rows)], dtype=np.int64))
            _node(el, "ElementStartOffset", "DataArray_t", "I8", np.cumsum([0] + [len(r) for r in rows]).astype(np.int64))
            _node(el, "ElementConnectivity", "DataArray_t", "I8",
                  np.concatenate([np.asarray(r, np.int64) + shift for r in rows]))
            at += len(rows)
    return Path(path)
