"""Meshes written as VTU files: a mesh with more point fields (:func:`write_vtu`), and a model's
prediction beside the truth with its metrics (:func:`write_prediction`, what ``meshshard predict``
and ``meshshard demo`` write); a ParaView collection of step files (:func:`write_pvd`, what
``meshshard rollout`` writes).

Every write is atomic (:func:`meshshard._fileutil.atomic_path`): an interruption leaves no partial
file under the target path, and an existing file is replaced whole.
"""
from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

from meshshard._fileutil import atomic_path
from meshshard.io.fields import POSITION_FIELD, parse_field, select_fields

__all__ = ["write_vtu", "write_prediction", "prediction_fields", "write_pvd", "PRED_SUFFIX", "ERROR_SUFFIX"]

#: the point field of a target's prediction is ``<target>_pred``, of its error ``<target>_error``
PRED_SUFFIX = "_pred"
ERROR_SUFFIX = "_error"


def _target_keys(targets: Sequence[str], columns: Sequence[str]) -> List[tuple]:
    """``(output name, first column, number of columns)`` per target spec, from the column names
    :func:`meshshard.io.field_columns` gave them at training (``name`` or ``name_<i>``)."""
    out, i = [], 0
    for spec in targets:
        name, comps = parse_field(spec)
        if comps is not None:
            width = len(comps)
        elif i < len(columns) and columns[i] == name:
            width = 1
        else:
            width = 0
            while i + width < len(columns) and columns[i + width] == f"{name}_{width}":
                width += 1
        out.append((name, i, width))
        i += width
    if i != len(columns) or any(w == 0 for _, _, w in out):
        raise ValueError(f"the checkpoint's target columns {list(columns)} do not match its targets {list(targets)}")
    names = [n for n, _, _ in out]
    if len(set(names)) < len(names):  # two specs of one field: name the outputs by column
        return [(columns[c], c, 1) for c in range(len(columns))]
    return out


def _base_mesh(mesh):
    """The vertex-based mesh a file is written from: ``mesh`` itself, or the mesh a cell-centred
    mesh (``mesh.nodes == "cells"``) was made from."""
    if getattr(mesh, "nodes", "points") != "cells":
        return mesh
    if mesh.vertex_mesh is None:
        raise ValueError(f"{mesh.source or 'this cell-centred mesh'} has lost the mesh its cells came from "
                         "(vertex_mesh is None): read it again with read_mesh(path, nodes='cells') to write it")
    return mesh.vertex_mesh


def _meshio_reads(source: Path) -> bool:
    """Whether meshio reads ``source`` (the VTK formats of :mod:`meshshard.io.vtk_formats` and numpy
    clouds it does not)."""
    from meshshard.io.vtk_formats import VTK_SUFFIXES

    suffix = source.suffix.lower()
    return not (source.is_dir() or suffix in (".npz", ".npy") or suffix in VTK_SUFFIXES)


def _output_mesh(mesh, source: Optional[Path]):
    """``mesh`` as a meshio mesh for the VTU: the file ``source`` as meshio reads it (every cell block
    and cell field), or ``mesh``'s own cells and cell fields where meshio cannot read such a file; 3D
    points; a point cloud gets vertex cells (meshio cannot read back a .vtu without cells). A
    cell-centred mesh is written as the mesh its cells came from."""
    import meshio

    base = _base_mesh(mesh)
    if source is None or not _meshio_reads(source):
        n = base.num_nodes
        cells = list(base.cells.items()) or [("vertex", np.arange(n).reshape(n, 1))]
        sizes = np.cumsum([len(c) for _, c in cells])[:-1]
        cell_data = {k: list(np.split(np.asarray(v), sizes)) for k, v in base.cell_data.items()} if base.cells else {}
        out = meshio.Mesh(np.asarray(base.points), cells,
                          point_data={k: np.asarray(v) for k, v in base.point_data.items()}, cell_data=cell_data)
    else:
        # read_mesh has read this file already and passed meshio's notes on; they are not repeated
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            out = meshio.read(source)
        out.cell_sets = {}  # VTU has no cell sets (SU2 markers); meshio would refuse some of them
    if out.points.shape[1] == 2:
        out.points = np.concatenate([out.points, np.zeros((len(out.points), 1))], axis=1)
    return out


def _cell_blocks(out, base, name: str, values: np.ndarray) -> List[np.ndarray]:
    """One field over ``base``'s volume cells (numbered as :class:`meshshard.io.Mesh` numbers them)
    split into the cell blocks of the meshio mesh ``out``; blocks of other cells (boundary lines or
    faces) get NaN."""
    from meshshard.io.cell_graph import cell_offsets

    values = np.asarray(values)
    if len(values) != base.num_cells:
        raise ValueError(f"cell field {name!r} has {len(values)} rows, the mesh {base.num_cells} volume cells")
    offsets = cell_offsets(base.cells)
    seen = {t: 0 for t in base.cells}
    blocks = []
    for block in out.cells:
        n = len(block.data)
        if block.type in seen:
            at = offsets[block.type] + seen[block.type]
            blocks.append(values[at:at + n])
            seen[block.type] += n
        else:
            blocks.append(np.full((n,) + values.shape[1:], np.nan))
    if any(seen[t] != len(c) for t, c in base.cells.items()):
        raise ValueError(f"the file's cell blocks hold {seen} volume cells, the mesh "
                         f"{ {t: len(c) for t, c in base.cells.items()} }: it changed since it was read")
    return blocks


def _write_polyhedral(path: Path, mesh, fields: Mapping, cells: bool) -> None:
    """:func:`write_vtu` for a mesh with polyhedra: its own volume cells through vtk
    (:func:`meshshard.io.write_vtk.write_vtu_vtk`; meshio cannot mix polyhedra with other cells)."""
    from meshshard.io.write_vtk import write_vtu_vtk

    base = _base_mesh(mesh)
    point_data = {k: np.asarray(v) for k, v in base.point_data.items()}
    cell_data = {k: np.asarray(v) for k, v in base.cell_data.items()}
    for name, values in fields.items():
        values = np.asarray(values)
        if cells and len(values) != base.num_cells:
            raise ValueError(f"cell field {name!r} has {len(values)} rows, the mesh {base.num_cells} volume cells")
        if not cells and len(values) != base.num_nodes:
            raise ValueError(f"point field {name!r} has {len(values)} rows, the mesh {base.num_nodes} points")
        (cell_data if cells else point_data)[name] = values
    with atomic_path(path) as tmp:
        write_vtu_vtk(tmp, base.points, base.cells, base.polyhedra, point_data, cell_data)


def write_vtu(path, mesh, point_data: Optional[Mapping] = None, *, source=None) -> Path:
    """Write ``mesh`` with its point fields and ``point_data`` as a .vtu file, atomically.

    An interruption leaves no partial file under ``path`` (:func:`meshshard._fileutil.atomic_path`).
    2D points get a zero z; a point cloud gets one vertex cell per point. A cell-centred mesh
    (``mesh.nodes == "cells"``, :func:`meshshard.io.cells_as_nodes`) is written as the mesh its
    cells came from, and ``point_data`` (one row per node, that is per volume cell) as CELL data
    of its volume cells; boundary cells of ``source`` get NaN in those fields. A mesh with
    polyhedra (``mesh.polyhedra``, OpenFOAM) is written through vtk with its volume cells and
    polyhedra (:func:`meshshard.io.write_vtk.write_vtu_vtk`), whatever ``source``.

    Args:
        path: the file to write (replaced if it exists).
        mesh: a :class:`meshshard.io.Mesh` with ``N`` nodes.
        point_data: more node fields, name -> array ``[N]`` or ``[N, C]``, written after the mesh's own
            (point data, or cell data of a cell-centred mesh).
        source: the file ``mesh`` was read from: its cells and cell fields are written as meshio reads
            them (boundary cells included); default, and for the formats meshio does not read
            (``.vtp``, ``.pvtu``, OpenFOAM, ...): ``mesh``'s volume cells and their cell fields.

    Returns:
        ``path``.
    """
    import meshio

    path = Path(path)
    cells = getattr(mesh, "nodes", "points") == "cells"
    if _base_mesh(mesh).polyhedra is not None:
        _write_polyhedral(path, mesh, point_data or {}, cells)
        return path
    out = _output_mesh(mesh, None if source is None else Path(source))
    for name, values in (point_data or {}).items():
        if cells:
            out.cell_data[name] = _cell_blocks(out, _base_mesh(mesh), name, values)
            continue
        if len(values) != len(out.points):
            raise ValueError(f"point field {name!r} has {len(values)} rows, the mesh {len(out.points)} points")
        out.point_data[name] = values
    with atomic_path(path) as tmp:
        meshio.write(tmp, out, file_format="vtu")
    return path


def prediction_fields(mesh, pred: torch.Tensor, targets: Sequence[str],
                      target_columns: Sequence[str]) -> Tuple[Dict[str, np.ndarray], Optional[torch.Tensor]]:
    """The fields :func:`write_prediction` adds: ``<target>_pred`` and, when ``mesh`` holds the
    target fields, ``<target>_error`` (prediction minus truth).

    Args:
        mesh: a :class:`meshshard.io.Mesh` (or a part of one) with ``N`` nodes; its target fields
            are the truth.
        pred: float64 de-normalised prediction ``[N, C]``.
        targets, target_columns: as :func:`write_prediction`.

    Returns:
        ``(fields, truth)``: name -> ``[N]`` or ``[N, w]`` arrays, and the truth ``[N, C]`` float64
        (``None`` when ``mesh`` lacks a target field).
    """
    has_truth = all(parse_field(t)[0] in mesh.point_data or parse_field(t)[0] == POSITION_FIELD for t in targets)
    truth = torch.from_numpy(select_fields(mesh, targets)) if has_truth and targets else None
    fields = {}
    for key, c0, width in _target_keys(targets, target_columns):
        cols = slice(c0, c0 + width)
        pred_name, error_name = f"{key}{PRED_SUFFIX}", f"{key}{ERROR_SUFFIX}"
        fields[pred_name] = pred[:, cols].squeeze(1).numpy() if width == 1 else pred[:, cols].numpy()
        if truth is not None:
            err = pred[:, cols] - truth[:, cols]
            fields[error_name] = err.squeeze(1).numpy() if width == 1 else err.numpy()
    return fields, truth


def write_prediction(path, mesh, pred: torch.Tensor, targets: Sequence[str], target_columns: Sequence[str], *,
                     source=None) -> Optional[Dict[str, Dict[str, float]]]:
    """Write ``mesh`` with a model's prediction as a .vtu file (atomically; what ``meshshard predict``
    and ``meshshard demo`` write).

    Each target gets the point field ``<target>_pred`` and, when ``mesh`` holds the target fields,
    ``<target>_error`` (prediction minus truth); for a cell-centred mesh (``mesh.nodes == "cells"``)
    they are cell fields of the mesh its cells came from (see :func:`write_vtu`); :func:`meshshard.viz.prediction_field_names` finds
    them by these suffixes (:data:`PRED_SUFFIX`, :data:`ERROR_SUFFIX`). ``<target>`` is the target's
    field name (its selected components are the field's columns), or the column name
    (``velocity_0``) where two targets select from one field.

    Args:
        path: the file to write (replaced if it exists).
        mesh: a :class:`meshshard.io.Mesh` with ``N`` nodes; its target fields are the truth.
        pred: de-normalised prediction ``[N, C]`` (one row per node: per cell of a cell-centred
            mesh), one column per name in ``target_columns``.
        targets: the target field specs the model was trained on (``["pressure", "velocity[0,1]"]``).
        target_columns: their ``C`` column names, as :func:`meshshard.io.field_columns` gives them.
        source: the file ``mesh`` was read from (see :func:`write_vtu`).

    Returns:
        per target column ``{"mse", "rel_l2", "max_abs"}`` (``rel_l2`` NaN where the column's truth
        is all zero), or ``None`` when ``mesh`` lacks a target field.
    """
    pred = pred.detach().to(torch.float64).cpu()
    if pred.dim() != 2 or pred.shape != (mesh.num_nodes, len(target_columns)):
        raise ValueError(f"{source or 'the mesh'}: pred must have shape [{mesh.num_nodes}, {len(target_columns)}] "
                         f"(one row per node, one column per target column {list(target_columns)}), "
                         f"got {list(pred.shape)}")
    fields, truth = prediction_fields(mesh, pred, targets, target_columns)
    write_vtu(path, mesh, fields, source=source)
    if truth is None:
        return None
    # an error relative to an all-zero truth is undefined (it was inf): NaN, and MSE / max |error| tell the size
    return {c: {"mse": float(((pred[:, j] - truth[:, j]) ** 2).mean()),
                "rel_l2": float(torch.linalg.vector_norm(pred[:, j] - truth[:, j]) / torch.linalg.vector_norm(truth[:, j]))
                if truth[:, j].any() else float("nan"),
                "max_abs": float((pred[:, j] - truth[:, j]).abs().max())}
            for j, c in enumerate(target_columns)}


def write_pvd(path, steps: Sequence[tuple]) -> Path:
    """Write a ParaView collection ``CASE.pvd`` listing step files, atomically (read back by
    :func:`meshshard.io.read_pvd`).

    Args:
        path: the ``.pvd`` file to write.
        steps: ``(time, file)`` per step, in order; ``file`` relative to the ``.pvd``'s folder (or
            absolute, then written relative to it when it lies below).

    Returns:
        ``path``.

    Raises:
        ValueError: no steps, or times not strictly increasing.
    """
    from xml.sax.saxutils import quoteattr

    path = Path(path)
    if not steps:
        raise ValueError("write_pvd: no steps to list")
    times = [float(t) for t, _ in steps]
    if any(b <= a for a, b in zip(times, times[1:])) or not all(np.isfinite(times)):
        raise ValueError(f"write_pvd: step times must be finite and strictly increasing, got {times[:8]}")
    rows = []
    for t, f in steps:
        f = Path(f)
        if f.is_absolute():
            try:
                f = f.relative_to(path.parent.resolve())
            except ValueError:
                pass
        rows.append(f'    <DataSet timestep="{float(t)!r}" group="" part="0" file={quoteattr(f.as_posix())}/>')
    text = ('<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n  <Collection>\n'
            + "\n".join(rows) + "\n  </Collection>\n</VTKFile>\n")
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path
