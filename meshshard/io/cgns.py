"""CGNS files (``.cgns``, HDF5 or ADF) through VTK's ``vtkCGNSReader`` (the extra ``meshshard[vtk]``).

What is read, per zone of every base:

- the volume cells of unstructured zones (every element section of the base's cell dimension,
  mixed element types included; ``NGON_n``/``NFACE_n`` sections as :attr:`Mesh.polyhedra`) and of
  structured zones (as hexahedra, or quadrilaterals in 2-D);
- the fields of ``FlowSolution_t`` nodes: ``Vertex`` fields as point data, ``CellCenter`` fields
  as cell data, at a chosen time when the file has several (``BaseIterativeData_t`` /
  ``ZoneIterativeData_t``);
- the boundary: every element section one dimension below the zone's cells (faces in 3-D, edges
  in 2-D; the layout solvers and mesh tools write, one section per patch) becomes boundary cells
  and a cell set named as the section, so ``preprocess`` gives its nodes a boundary type.

Not read: ``BC_t`` nodes themselves. The reader's own BC loading keeps only a few BC types
(``FamilySpecified``, ``BCDirichlet``, ``BCNeumann``, ``BCWall*``), skips ``BCInflow``,
``BCOutflow``, ``BCFarfield`` and the rest, and takes a ``Vertex`` ``PointList`` for element
numbers; and with both of its patch options on it crashes the process. So only boundary sections
are used, and a file whose boundary is given by ``BC_t`` point lists alone reads without boundary
sets (``preprocess`` then says so). Structured zones carry no boundary sets.

Several zones are merged into one mesh: points on zone interfaces are kept once (by coordinates),
each zone is a cell set named as the zone, and the cell field ``block`` numbers the zones. A
boundary section's cells refer to its zone's points directly (the reader shares them), so no
coordinate matching is done within a zone.

Damaged or malformed files: a file that is not CGNS is refused before reading; a node the reader
fails to read (a missing coordinates node, an array shorter than the zone says: the reader then
leaves the array unfilled and goes on) raises ValueError with the reader's message, collected from
VTK's output window and from file descriptor 2, where the CGNS I/O layer writes (output another
thread writes there during the read would be taken for such a report). Not guarded: an
``ElementConnectivity`` shorter than its ``ElementRange`` declares makes the reader itself crash.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

__all__ = ["read_cgns_parts"]


def _name(multiblock, i: int) -> str:
    from vtkmodules.vtkCommonDataModel import vtkCompositeDataSet

    meta = multiblock.GetMetaData(i) if multiblock.HasMetaData(i) else None
    return meta.Get(vtkCompositeDataSet.NAME()) if meta is not None and meta.Has(vtkCompositeDataSet.NAME()) \
        else f"block{i}"


def _children(multiblock) -> List[Tuple[str, object]]:
    return [(_name(multiblock, i), multiblock.GetBlock(i)) for i in range(multiblock.GetNumberOfBlocks())
            if multiblock.GetBlock(i) is not None]


def _zones(out, path: Path) -> List[Tuple[str, object, List[Tuple[str, object]]]]:
    """(zone name, volume dataset, [(section name, boundary dataset)]) of every zone of every base."""
    zones = []
    for _, base in _children(out):
        if not base.IsA("vtkMultiBlockDataSet"):
            raise ValueError(f"cannot read {path} as CGNS: unexpected reader output {base.GetClassName()}")
        for zname, zone in _children(base):
            if zone.IsA("vtkDataSet"):
                zones.append((zname, zone, []))
                continue
            blocks = dict(_children(zone))
            surfaces = blocks.get("Surfaces")
            zones.append((zname, blocks.get("Internal"),
                          _children(surfaces) if surfaces is not None and surfaces.IsA("vtkMultiBlockDataSet") else []))
    return [z for z in zones if z[1] is not None and z[1].GetNumberOfPoints()]


@contextlib.contextmanager
def _stderr_text(into: List[str]) -> Iterator[None]:
    """Append what is written to file descriptor 2 meanwhile (the CGNS I/O layer reports failed
    reads there, not to VTK) to ``into``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            into.append(tmp.read().decode(errors="replace"))


@contextlib.contextmanager
def _vtk_messages(path: Path) -> Iterator[None]:
    """Collect what VTK and the CGNS I/O layer report while reading: an error, or a failed read of a
    node (the reader then leaves the array unfilled and goes on), raises ValueError; other warnings
    become Python warnings."""
    from vtkmodules.vtkCommonCore import vtkObject, vtkOutputWindow, vtkStringOutputWindow

    previous, shown = vtkOutputWindow.GetInstance(), vtkObject.GetGlobalWarningDisplay()
    window = vtkStringOutputWindow()
    vtkOutputWindow.SetInstance(window)
    vtkObject.GlobalWarningDisplayOn()
    raw: List[str] = []
    try:
        with _stderr_text(raw):
            yield
    finally:
        vtkOutputWindow.SetInstance(previous)
        vtkObject.SetGlobalWarningDisplay(shown)
    # each VTK message: a header line ("ERROR: In file, line n" / "Warning: ..." / "Generic Warning:
    # ...") then the text, with the object's address in front
    messages = [(head, " ".join(re.sub(r"^\w+ \(0x[0-9a-f]+\): ", "", body.strip()).split()))
                for head, body in re.findall(r"^(ERROR|Warning|Generic Warning): In [^\n]*\n(.*?)(?=\n\n|\Z)",
                                             window.GetOutput(), flags=re.S | re.M)]
    # on stderr: VTK's log lines of the same messages (dropped), and the I/O layer's own reports
    text = re.sub(r"\x1b\[[0-9;]*m\d{4}-\d\d-\d\d [^\x1b]*\x1b\[0m", "", "".join(raw))  # VTK's (coloured) log
    io_errors = [" ".join(line.split()) for line in re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()
                 if line.strip() and not re.search(r"^\d{4}-\d\d-\d\d .*\s(ERR|WARN|INFO)\|", line)]
    failed = [m for head, m in messages if head == "ERROR" or "cgio_" in m] + io_errors
    if len(failed) > 1:  # the pipeline's "Algorithm ... returned failure" (an information dump) adds nothing
        failed = [m for m in failed if not m.startswith("Algorithm ")] or failed
    if failed:
        raise ValueError(f"cannot read {path} as CGNS (a damaged or malformed file): {'; '.join(failed)}")
    for _, m in messages:
        warnings.warn(f"{path.name}: {m}", stacklevel=5)


def _unstructured(ds):
    """A structured grid as an unstructured one (same point and cell order)."""
    from vtkmodules.vtkFiltersCore import vtkAppendFilter

    append = vtkAppendFilter()
    append.AddInputData(ds)
    append.MergePointsOff()
    append.Update()
    return append.GetOutput()


def read_cgns_parts(path: Path, time: Optional[float]) -> list:
    """Read a CGNS file into the parts :func:`meshshard.io.vtk_formats.read_vtk` merges.

    Args:
        path: the ``.cgns`` file.
        time: the time to read where the file has several (default: its last).

    Returns:
        list of ``_Part``: per zone its volume (named as the zone when there are several zones),
        then its boundary sections (named as the sections, sharing the volume's points).

    Raises:
        ValueError: not a CGNS file, a file the reader reports errors for, no time ``time``,
            no zone with points, or cells meshshard does not convert.
    """
    from vtkmodules.vtkIOCGNSReader import vtkCGNSReader

    from meshshard.io.vtk_formats import _Part, _update_at

    reader = vtkCGNSReader()
    with _stderr_text([]):  # it logs why it cannot; the error below says so
        cgns = reader.CanReadFile(str(path))
    if not cgns:
        raise ValueError(f"cannot read {path}: not a CGNS file (neither CGNS/HDF5 nor CGNS/ADF)")
    with _vtk_messages(path):
        reader.SetFileName(str(path))
        reader.UpdateInformation()
    reader.EnableAllBases()
    reader.EnableAllPointArrays()
    reader.EnableAllCellArrays()
    # Boundary sections only: with LoadBndPatch on as well the reader writes past an array of two
    # sub-blocks and crashes, and its BC_t reading drops most BC types (see the module doc).
    reader.LoadBndPatchOff()
    reader.LoadSurfacePatchOn()
    with _vtk_messages(path):
        out = _update_at(reader, time, path)
    if out is None:
        raise ValueError(f"cannot read {path} as CGNS: the reader gave no output")
    zones = _zones(out, path)
    if not zones:
        raise ValueError(f"cannot read {path} as CGNS: no zone with points (an empty or damaged file)")
    parts = []
    for zname, volume, sections in zones:
        if volume.IsA("vtkStructuredGrid"):
            volume = _unstructured(volume)
        owner = len(parts)
        try:
            part = _Part(volume, zname)
        except ValueError as exc:  # cells of a type not converted, point numbers out of range
            raise ValueError(f"{path}: zone {exc}") from exc
        part.name = zname if len(zones) > 1 else ""  # one zone: no set of every cell
        parts.append(part)
        for sname, ds in sections:
            if not ds.IsA("vtkDataSet") or not ds.GetNumberOfCells():
                continue
            shares = ds.GetNumberOfPoints() == volume.GetNumberOfPoints() and ds.GetPoints() is volume.GetPoints()
            parts.append(_Part(ds, sname, points_of=owner if shares else None))
    return parts

