"""``read_mesh``: any meshio format, plus ``.npz`` / ``.npy`` point clouds, into a :class:`Mesh`."""
from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Union

import numpy as np

from meshshard._fileutil import release_free_heap
from meshshard._optional import require
from meshshard.io.cell_edges import topological_dim
from meshshard.io.mesh import Mesh

__all__ = ["read_mesh", "supported_suffixes", "point_field_names", "is_reader_field", "READER_FIELD_PREFIXES"]

PathLike = Union[str, os.PathLike]

# meshio notes that are expected and carry no information for us: SU2 FFD sections it skips,
# and string marker names it renumbers (we recover the names ourselves, see _su2_marker_names).
_HARMLESS = ("could not parse line", "does not support tags of string type", "will be replaced by", "skipping")


# Prefixes meshio 5.3's readers give their own bookkeeping arrays (gmsh:dim_tags, medit:ref,
# nastran:ref, ...; grep of meshio's readers), plus other format names for readers to come.
READER_FIELD_PREFIXES = ("gmsh:", "medit:", "nastran:", "tetgen:", "netgen:", "ugrid:", "su2:", "avsucd:", "med:",
                         "obj:", "flac3d:", "abaqus:", "ansys:", "exodus:", "vtk:", "vtu:", "xdmf:", "h5m:")


def is_reader_field(name: str) -> bool:
    """True for a point field a file reader adds for its own bookkeeping (``gmsh:dim_tags``).

    Such fields are not data: meshshard never stores them unless asked for by name.

    Args:
        name: a ``point_data`` key.
    """
    return str(name).lower().startswith(READER_FIELD_PREFIXES)


def point_field_names(path: PathLike, nodes: str = "points") -> List[str]:
    """Names of the point fields :func:`read_mesh` would give ``path``, found cheaply where possible.

    A ``.npz`` is not loaded (its member names are listed) and a ``.vtu`` is scanned only for its
    ``<PointData>`` header; other formats are read whole. For a ``.npz`` the list may hold an
    array that :func:`read_mesh` drops for having the wrong number of rows.

    Args:
        path: a mesh or point-cloud file.
        nodes: ``"cells"`` for the fields of ``read_mesh(path, nodes="cells")`` (the cell fields).

    Returns:
        sorted field names (the coordinates ``points`` / ``pos`` of a ``.npz`` are not a field).

    Raises:
        FileNotFoundError, ValueError: as :func:`read_mesh`.
    """
    path = Path(path)
    if _check_nodes(nodes) == "cells":
        return sorted(read_mesh(path).cell_data)
    suffix = path.suffix.lower()
    if path.is_file() and suffix == ".npz":
        import zipfile

        try:
            with zipfile.ZipFile(path) as z:
                names = [n[:-4] for n in z.namelist() if n.endswith(".npy")]
        except (zipfile.BadZipFile, OSError):
            names = None  # read_mesh names the problem
        if names is not None:
            key = "points" if "points" in names else "pos"
            return sorted(n for n in names if n != key)
    if path.is_file() and suffix == ".vtu":
        names = _vtu_point_field_names(path)
        if names is not None:
            return names
    if path.is_file() and suffix in (".pvtu", ".pvtp"):
        names = _parallel_point_field_names(path)
        if names is not None:
            return names
    return sorted(read_mesh(path).point_data)


def _parallel_point_field_names(path: Path) -> Optional[List[str]]:
    """The point fields a ``.pvtu`` / ``.pvtp`` master declares (its ``<PPointData>``), without
    VTK's ghost marks and global point ids; None when it declares none or is not valid XML."""
    import xml.etree.ElementTree as ET

    from meshshard.io.vtk_formats import _GHOST, _GLOBAL_ID_NAMES

    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return None
    block = next(root.iter("PPointData"), None)
    if block is None:
        return None
    names = []
    for a in block.iter("PDataArray"):
        name = a.get("Name")
        is_int = "Int" in (a.get("type") or "") and a.get("NumberOfComponents", "1") == "1"
        if not name or name == _GHOST or name == block.get("GlobalIds") or (is_int and name in _GLOBAL_ID_NAMES):
            continue
        names.append(name)
    return sorted(set(names))


_XML_NAME = re.compile(rb'\bName="([^"]*)"')


def _xml_tags(path: Path, chunk: int):
    """The text inside each ``<...>`` of an XML file, in order, read in chunks.

    Text between tags (a VTU's inline base64 or ASCII arrays) holds no ``<`` and is skipped by a
    byte search, never parsed or kept; raw appended data comes after every tag that matters here.
    """
    buf = b""
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                return
            buf += block
            pos = 0
            while True:
                i = buf.find(b"<", pos)
                if i < 0:
                    buf = b""
                    break
                j = buf.find(b">", i)
                if j < 0:
                    buf = buf[i:]
                    break
                yield buf[i + 1:j]
                pos = j + 1


def _vtu_point_field_names(path: Path, chunk: int = 1 << 22) -> Optional[List[str]]:
    """The PointData array names of a VTU's first piece, or None when the header is not as expected.

    Only the tags are looked at: the arrays between them (meshio writes them inline, after the
    points and cells) are skipped by a byte search. The scan stops at the end of the first piece's
    ``<PointData>`` (or of the piece: then it has no point fields), or at ``<AppendedData>``.
    """
    from xml.sax.saxutils import unescape

    names: List[str] = []
    inside = False
    try:
        for tag in _xml_tags(path, chunk):
            if tag.startswith(b"PointData"):
                if tag.endswith(b"/"):
                    return []
                inside = True
            elif tag.startswith(b"DataArray") and inside:
                m = _XML_NAME.search(tag)
                if m:
                    names.append(unescape(m.group(1).decode("utf-8", "replace"), {"&quot;": '"', "&apos;": "'"}))
            elif tag.startswith((b"/PointData", b"/Piece")):
                return sorted(set(names))
            elif tag.startswith(b"AppendedData"):
                return None
    except OSError:
        return None
    return None


_VTU_FACE_ARRAYS = (b"faces", b"face_connectivity", b"polyhedron_to_faces")


def _vtu_has_polyhedra(path: Path, chunk: int = 1 << 22) -> bool:
    """Whether a ``.vtu``'s ``<Cells>`` declare polyhedron faces (VTK's ``faces`` array, or the
    ``face_connectivity`` / ``polyhedron_to_faces`` arrays of VTK 9.4 and later).

    Only the tags up to ``</Cells>`` (or ``<AppendedData>``) are looked at, as
    :func:`_vtu_point_field_names` does: the inline arrays between them are skipped by a byte search.
    """
    try:
        for tag in _xml_tags(path, chunk):
            if tag.startswith(b"DataArray"):
                m = _XML_NAME.search(tag)
                if m and m.group(1) in _VTU_FACE_ARRAYS:
                    return True
            elif tag.startswith((b"/Cells", b"AppendedData")):
                return False
    except OSError:
        return False
    return False


def supported_suffixes() -> List[str]:
    """File suffixes :func:`read_mesh` understands (meshio's, ``.npz`` / ``.npy``, and the VTK
    formats of :mod:`meshshard.io.vtk_formats`, which need the extra ``meshshard[vtk]``)."""
    import meshio

    from meshshard.io.vtk_formats import VTK_SUFFIXES

    return sorted(set(meshio.extension_to_filetypes) | {".npz", ".npy"} | set(VTK_SUFFIXES))


def _check_nodes(nodes: str) -> str:
    if nodes not in ("points", "cells"):
        raise ValueError(f"nodes must be 'points' (mesh vertices) or 'cells' (cell centres), got {nodes!r}")
    return nodes


def read_mesh(path: PathLike, file_format: Optional[str] = None, nodes: str = "points",
              time: Optional[float] = None) -> Mesh:
    """Read a mesh or point cloud.

    Args:
        path: a file meshio reads (``.vtu .vtk .msh .su2 .xdmf ...``), a VTK format read through
            the ``vtk`` package (``.vtp .pvtu .pvtp .vtm``, legacy ``.vtk`` polydata, EnSight
            ``.case``, an OpenFOAM ``.foam`` marker file or case folder, a CGNS ``.cgns`` file; see
            :mod:`meshshard.io.vtk_formats` and :mod:`meshshard.io.cgns`), a ``.npz`` with an
            array ``points`` [N, d] (every other array with N rows becomes ``point_data``), or a
            ``.npy`` array [N, d] of points.
        file_format: meshio format name, to override the guess from the suffix.
        nodes: ``"points"`` (default): the nodes are the mesh vertices. ``"cells"``: the nodes
            are the volume cells (:func:`meshshard.io.cells_as_nodes`: centres as positions, cell
            fields as ``point_data``, cells sharing a face or side as the graph).
        time: the time to read from an OpenFOAM or EnSight case or a CGNS file (default: its last).

    Returns:
        :class:`Mesh` with float64 points [N, d] (d = 2 when the mesh is planar: a zero z column of
        a 2D mesh is dropped), volume ``cells``, ``polyhedra`` (polyhedral cells of OpenFOAM cases and
        of ``.vtu`` files, read through vtk), ``boundary_cells``, ``cell_sets``/``node_sets``
        (SU2 markers, gmsh physical groups, VTK block names, OpenFOAM patches, CGNS boundary
        sections), ``point_data``,
        ``cell_data`` (fields of the volume cells).

    Raises:
        FileNotFoundError: the file does not exist.
        ImportError: a VTK format without the ``vtk`` package (names ``meshshard[vtk]``).
        ValueError: the file cannot be read as a mesh (message names file, format and the problem).
    """
    _check_nodes(nodes)
    mesh = _read_vertices(Path(path), file_format, time)
    if nodes == "cells":
        from meshshard.io.cells_as_nodes import cells_as_nodes

        return cells_as_nodes(mesh)
    return mesh


def _read_vertices(path: Path, file_format: Optional[str], time: Optional[float]) -> Mesh:
    from meshshard.io.vtk_formats import VTK_SUFFIXES, is_openfoam_case, read_vtk

    if not path.exists():
        raise FileNotFoundError(f"mesh file not found: {path}")
    if path.is_dir() and not is_openfoam_case(path):
        raise ValueError(f"{path} is a directory, not a mesh file (nor an OpenFOAM case: no system/controlDict)")
    suffix = path.suffix.lower()
    from meshshard._optional import has_module

    if file_format is None and suffix == ".pvtu" and not has_module("vtk"):  # its .vtu pieces through meshio
        from meshshard.io.pvtu_meshio import read_pvtu_meshio

        return read_pvtu_meshio(path)
    if file_format is None and suffix == ".cgns":
        return _read_cgns(path, time)
    if file_format is None and (suffix in VTK_SUFFIXES or path.is_dir()):
        return read_vtk(path, time=time)
    if file_format is None and suffix in (".npz", ".npy"):
        return _read_numpy(path)
    if file_format is None and suffix == ".vtu" and _vtu_has_polyhedra(path):
        # meshio cannot read a .vtu mixing polyhedra with other cells (nor VTK's newer layout of them)
        require("vtk", f"reading the polyhedral cells of {path.name}")
        return read_vtk(path, time=time)
    if file_format is None and suffix == ".vtk":
        try:
            return _read_meshio(path, file_format)
        except ValueError as exc:  # meshio reads legacy unstructured grids only, vtk the rest (polydata)
            from meshshard._optional import has_module

            if not has_module("vtk"):
                raise ValueError(f"{exc} (legacy .vtk polydata needs the vtk package: pip install 'meshshard[vtk]')") \
                    from exc
            return read_vtk(path, time=time)
    return _read_meshio(path, file_format)


def _read_cgns(path: Path, time: Optional[float]) -> Mesh:
    """A CGNS file through vtkCGNSReader; a file in meshio's own ``.cgns`` layout (no
    ``CGNSBase_t``, which VTK does not open) through meshio."""
    from meshshard._optional import has_module
    from meshshard.io.vtk_formats import read_vtk

    if has_module("vtk"):
        try:
            return read_vtk(path, time=time)
        except ValueError as exc:
            if "not a CGNS file" not in str(exc):
                raise
            try:
                return _read_meshio(path, None)
            except ValueError:
                raise exc from None
    try:
        return _read_meshio(path, None)
    except ValueError as exc:
        raise ValueError(f"{exc} (CGNS files are read through the vtk package: pip install 'meshshard[vtk]')") \
            from exc


def _read_error(path: Path, fmt: str, why: str) -> ValueError:
    suffix = path.suffix.lower()
    if suffix and suffix in supported_suffixes():
        # the suffix is one we read: the file itself is at fault, a list of suffixes would not help
        return ValueError(f"cannot read mesh file {path} as format {fmt!r}: {why.rstrip('. ')}. "
                          f"The file is damaged or is not a {suffix} file")
    return ValueError(
        f"cannot read mesh file {path} as format {fmt!r}: {why.rstrip('. ')}. "
        f"Supported suffixes: {' '.join(supported_suffixes())}"
    )


def _read_numpy(path: Path) -> Mesh:
    fmt = path.suffix.lower().lstrip(".")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:  # corrupt archive, pickled object arrays, ...
        raise _read_error(path, fmt, f"{type(exc).__name__}: {exc}") from exc
    if isinstance(data, np.ndarray):  # .npy
        return _mesh_from_arrays(path, fmt, data, {})
    with data:
        arrays = {k: data[k] for k in data.files}
    key = "points" if "points" in arrays else "pos" if "pos" in arrays else None
    if key is None:
        raise _read_error(path, fmt, f"no array named 'points' (arrays: {sorted(arrays)})")
    points = arrays.pop(key)
    n = points.shape[0] if points.ndim >= 1 else -1
    fields = {k: v for k, v in arrays.items() if v.ndim >= 1 and v.shape[0] == n}
    return _mesh_from_arrays(path, fmt, points, fields)


def _mesh_from_arrays(path: Path, fmt: str, points: np.ndarray, fields) -> Mesh:
    try:
        return Mesh(points, point_data=fields, source=path)
    except (TypeError, ValueError) as exc:
        raise _read_error(path, fmt, str(exc)) from exc


def _read_meshio(path: Path, file_format: Optional[str]) -> Mesh:
    import meshio

    fmt = file_format or path.suffix.lower() or "(no suffix)"
    captured = io.StringIO()
    try:
        # meshio prints notes through rich to stderr, and some read errors to stdout
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            m = None
            if file_format is None and path.suffix.lower() == ".vtu":  # streamed: a fraction of meshio's memory
                from meshshard.io.vtu_lean import read_vtu

                m = read_vtu(path)  # None: a layout it leaves to meshio
            if m is None:
                m = meshio.read(path, file_format=file_format)
    except SystemExit as exc:  # meshio calls sys.exit(1) when no reader accepts the file
        why = " ".join(captured.getvalue().split()) or "meshio rejected the file"
        raise _read_error(path, fmt, why) from exc
    except ModuleNotFoundError as exc:  # e.g. h5py for HDF5-backed XDMF: say how to install it
        require(exc.name or str(exc), f"reading {path.name}")
        raise
    except Exception as exc:  # meshio raises ReadError, ValueError, IndexError, ... on bad files
        raise _read_error(path, fmt, f"{type(exc).__name__}: {exc}") from exc
    _forward_meshio_notes(captured.getvalue(), path)
    if len(m.points) == 0:
        raise _read_error(path, fmt, "the file holds no points")

    # Concatenate blocks of one type (gmsh splits cells by entity), remembering each block's offset.
    by_type: Dict[str, List[np.ndarray]] = {}
    block_pos = []  # (type, offset of the block inside its type)
    for block in m.cells:
        chunks = by_type.setdefault(block.type, [])
        block_pos.append((block.type, sum(len(c) for c in chunks)))
        chunks.append(np.asarray(block.data, dtype=np.int64))
    all_cells = {t: np.concatenate(c) if len(c) > 1 else c[0] for t, c in by_type.items()}
    dims = {t: topological_dim(t) for t in all_cells}
    top = max((d for d in dims.values() if d >= 1), default=None)
    cells = {t: c for t, c in all_cells.items() if top is not None and dims[t] == top}
    boundary = {t: c for t, c in all_cells.items() if t not in cells}

    points = np.asarray(m.points, dtype=np.float64)
    if points.ndim == 2 and points.shape[1] == 3 and (top is None or top <= 2) and not points[:, 2].any():
        points = points[:, :2]  # planar mesh stored with a zero z column (VTK always writes 3D)

    cell_sets = _cell_sets(m, path, block_pos)
    point_data = {k: np.asarray(v) for k, v in m.point_data.items()}
    cell_data = _volume_cell_data(m, cells)
    del m, all_cells, by_type
    # the reader's temporaries (decoded buffers, XML text) were freed into the heap: hand them back
    release_free_heap()
    try:
        return Mesh(points, cells=cells, boundary_cells=boundary, cell_sets=cell_sets,
                    point_data=point_data, source=path, cell_data=cell_data)
    except (TypeError, ValueError) as exc:
        raise _read_error(path, fmt, str(exc)) from exc


def _volume_cell_data(m, cells: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """meshio's cell fields of the volume cells, in the order of ``cells`` (reader bookkeeping left out)."""
    out = {}
    for name, per_block in m.cell_data.items():
        if is_reader_field(name) or len(per_block) != len(m.cells):
            continue
        chunks = [np.asarray(arr) for t in cells for block, arr in zip(m.cells, per_block) if block.type == t]
        if chunks and len({c.shape[1:] for c in chunks}) == 1:
            out[str(name)] = np.concatenate(chunks)
    return out


def _forward_meshio_notes(text: str, path: Path) -> None:
    """Re-emit meshio's stderr notes as Python warnings, minus the known harmless ones."""
    if not text.strip():
        return
    kept = [blk.strip() for blk in re.split(r"(?m)^(?=Warning:|Error:)", text)
            if blk.strip() and not any(h in blk for h in _HARMLESS)]
    for note in kept:
        warnings.warn(f"meshio, reading {path.name}: {note}", stacklevel=3)


def _cell_sets(m, path: Path, block_pos) -> Dict[str, Dict[str, np.ndarray]]:
    """Named cell sets as {name: {cell type: row indices into that type's concatenated cells}}."""
    raw: Dict[str, List[Optional[np.ndarray]]] = {}
    # meshio's own bookkeeping rides in cell_sets too (gmsh 4 files: "gmsh:bounding_entities",
    # entity tags rather than cell indices): only user-named sets are sets
    named = {k: v for k, v in (m.cell_sets or {}).items() if not str(k).startswith("gmsh:")}
    if named:
        raw = {name: list(blocks) for name, blocks in named.items()}
    elif "su2:tag" in m.cell_data:
        names = _su2_marker_names(path)
        for name, tag in names.items():
            raw[name] = [np.flatnonzero(np.asarray(tags) == tag) for tags in m.cell_data["su2:tag"]]
    elif "gmsh:physical" in m.cell_data and m.field_data:
        for name, (tag, *_rest) in ((k, np.atleast_1d(v)) for k, v in m.field_data.items()):
            raw[name] = [np.flatnonzero(np.asarray(tags) == tag) for tags in m.cell_data["gmsh:physical"]]
    elif "gmsh:physical" in m.cell_data:
        # physical tags without their names (a gmsh mesh converted to .vtu keeps the tags only):
        # named by number, so the boundaries are not lost
        tags = {int(t) for arr in m.cell_data["gmsh:physical"] for t in np.unique(np.asarray(arr))}
        for tag in sorted(tags - {0}):
            raw[f"physical_{tag}"] = [np.flatnonzero(np.asarray(a) == tag) for a in m.cell_data["gmsh:physical"]]
    block_len = [len(b.data) for b in m.cells]
    out: Dict[str, Dict[str, np.ndarray]] = {}
    for name, blocks in raw.items():
        per_type: Dict[str, List[np.ndarray]] = {}
        if len(blocks) != len(block_pos):
            warnings.warn(f"{path.name}: cell set {name!r} does not match the cell blocks; skipped", stacklevel=4)
            continue
        for (ctype, offset), idx, size in zip(block_pos, blocks, block_len):
            if idx is None or len(idx) == 0:
                continue
            idx = np.asarray(idx).reshape(-1)
            if not np.issubdtype(idx.dtype, np.integer) or idx.min() < 0 or idx.max() >= size:
                warnings.warn(f"{path.name}: cell set {name!r} holds indices outside its {ctype} block; "
                              "skipped", stacklevel=4)
                per_type = {}
                break
            per_type.setdefault(ctype, []).append(idx.astype(np.int64) + offset)
        if per_type:
            out[str(name)] = {t: np.concatenate(v) for t, v in per_type.items()}
    return out


def _su2_marker_names(path: Path) -> Dict[str, int]:
    """Marker name -> the integer tag meshio gave it (meshio numbers string tags 1, 2, ... in order)."""
    names: Dict[str, int] = {}
    next_id = 0
    opener = open
    if path.suffix.lower() == ".gz":
        import gzip

        opener = gzip.open
    with opener(path, "rt", errors="replace") as f:
        for line in f:
            s = line.strip()
            if not s.startswith("MARKER_TAG"):
                continue
            _, _, tag = s.partition("=")
            tag = tag.strip()
            try:
                next_id = int(tag)
            except ValueError:
                next_id += 1
            names[tag] = next_id
    return names
