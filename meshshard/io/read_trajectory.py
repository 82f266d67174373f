"""``read_trajectory``: a transient case (``.pvd``, XDMF time series, numbered step files, a
MeshGraphNets dataset) into a :class:`Trajectory`."""
from __future__ import annotations

import contextlib
import io
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from meshshard._optional import require
from meshshard.io.cell_edges import topological_dim
from meshshard.io.meshgraphnets import is_meshgraphnets_dir, iter_meshgraphnets, read_meshgraphnets
from meshshard.io.read import is_reader_field, read_mesh, supported_suffixes
from meshshard.io.trajectory import Trajectory

__all__ = ["read_trajectory", "iter_trajectories", "read_pvd", "read_xdmf_series", "read_step_files",
           "list_step_files"]

PathLike = Union[str, os.PathLike]
StaticSpec = Optional[Sequence[str]]
_LAYOUTS = ("a ParaView collection (.pvd), an XDMF time series (.xdmf/.xmf), a folder of numbered step files "
            "(step_0000.vtu, step_0001.vtu, ...), or a MeshGraphNets dataset (a folder with meta.json and "
            "<split>.tfrecord, or one such .tfrecord)")
_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<num>\d+)(?P<suffix>(?:\.[A-Za-z][A-Za-z0-9]*)+)$")


# ---- shared: steps of one mesh into a Trajectory -------------------------------------------------

def _same_mesh(points0, cells0, points, cells, what: str, what0: str) -> None:
    """Raise ValueError naming the difference when a step's mesh is not the first step's."""
    if points.shape != points0.shape:
        raise ValueError(f"steps with different meshes: {what} has {points.shape[0]} nodes in {points.shape[1]}D, "
                         f"{what0} has {points0.shape[0]} in {points0.shape[1]}D (a trajectory has one mesh for "
                         "every step)")
    scale = float(np.abs(points0).max()) if points0.size else 0.0
    moved = float(np.abs(points - points0).max()) if points.size else 0.0
    if moved > 1e-9 * max(scale, 1e-300):
        raise ValueError(f"steps with different meshes: the nodes of {what} differ from those of {what0} by up to "
                         f"{moved:.3g} (a trajectory has one mesh for every step; a moving mesh is not supported)")
    if set(cells) != set(cells0) or any(not np.array_equal(cells[t], cells0[t]) for t in cells0):
        raise ValueError(f"steps with different meshes: the cells of {what} differ from those of {what0} "
                         "(a trajectory has one mesh for every step)")


def _collect(per_step: List[Dict[str, np.ndarray]], labels: List[str],
             fields: StaticSpec) -> Dict[str, np.ndarray]:
    """Stack each field over the steps into [T, N, F], checking that every step has it, same shape."""
    first = per_step[0]
    if fields is None:
        wanted = [k for k in sorted(first) if not is_reader_field(k)]
    else:
        wanted = list(dict.fromkeys(fields))
    out = {}
    for key in wanted:
        rows = []
        for data, label in zip(per_step, labels):
            if key not in data:
                have = sorted(k for k in data if not is_reader_field(k))
                where = "" if fields is not None else f" (step 0, {labels[0]}, has it)"
                raise ValueError(f"missing field: {label} has no point field {key!r}{where}; it has {have}")
            arr = np.asarray(data[key])
            arr = arr.reshape(arr.shape[0], -1)
            if rows and arr.shape != rows[0].shape:
                raise ValueError(f"field {key!r} has shape {list(arr.shape)} in {label} but {list(rows[0].shape)} in "
                                 f"{labels[0]}")
            rows.append(arr)
        out[key] = np.stack(rows)
    return out


def _split_static(stacked: Dict[str, np.ndarray], static: StaticSpec, labels: List[str]):
    """Per-step fields and static ones: ``static=None`` makes static every field equal at all steps."""
    if static is None:
        names = [k for k, v in stacked.items() if (v == v[:1]).all()]
    else:
        names = list(dict.fromkeys(static))
        for key in names:
            if key not in stacked:
                raise ValueError(f"missing field: static field {key!r} is not among the fields read: {sorted(stacked)}")
            v = stacked[key]
            if not (v == v[:1]).all():
                t = int(np.flatnonzero((v != v[:1]).reshape(len(v), -1).any(axis=1))[0])
                raise ValueError(f"field {key!r} was named static but changes: {labels[t]} differs from {labels[0]}")
    fields = {k: v for k, v in stacked.items() if k not in names}
    return fields, {k: stacked[k][0] for k in names}


def _from_meshes(meshes_or_paths, times, labels: List[str], fields: StaticSpec, static: StaticSpec, source: Path,
                 name: str) -> Trajectory:
    """A Trajectory from step files (read one at a time) of one mesh."""
    if len(labels) < 2:
        raise ValueError(f"{source}: a trajectory needs at least 2 time steps, found {len(labels)} "
                         f"({', '.join(labels) or 'none'}); a single step is a steady sample (read it with "
                         "meshshard.read_mesh)")
    first = None
    per_step = []
    for item, label in zip(meshes_or_paths, labels):
        mesh = read_mesh(item) if isinstance(item, (str, Path)) else item
        if mesh.polyhedra is not None:  # a Trajectory holds [n, k] cells only: its graph would lose them
            raise ValueError(f"{source}: step {label} has polyhedral cells ({mesh.polyhedra.num_cells}); "
                             "time series of polyhedral meshes are not read yet: read each step with "
                             "meshshard.read_mesh")
        if first is None:
            first = mesh
        else:
            _same_mesh(first.points, first.cells, mesh.points, mesh.cells, label, labels[0])
        per_step.append(mesh.point_data)
    stacked = _collect(per_step, labels, fields)
    dyn, stat = _split_static(stacked, static, labels)
    return Trajectory(first.points, first.cells, boundary_cells=first.boundary_cells, fields=dyn, static=stat,
                      times=times, source=source, name=name)


# ---- ParaView collection -------------------------------------------------------------------------

def _pvd_entries(path: Path) -> List[Tuple[float, Path]]:
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ValueError(f"{path}: not a readable ParaView collection (XML: {exc})") from exc
    if root.tag != "VTKFile" or root.get("type", "Collection") != "Collection":
        raise ValueError(f"{path}: not a ParaView collection: the root is <{root.tag} type={root.get('type')!r}>, "
                         "expected <VTKFile type=\"Collection\">")
    entries = []
    for i, ds in enumerate(root.iter("DataSet")):
        file = ds.get("file")
        if not file:
            raise ValueError(f"{path}: <DataSet> entry {i} has no 'file' attribute")
        try:
            t = float(ds.get("timestep", "nan"))
        except ValueError as exc:
            raise ValueError(f"{path}: <DataSet file={file!r}> has a timestep {ds.get('timestep')!r} that is "
                             "not a number") from exc
        if not np.isfinite(t):
            raise ValueError(f"{path}: <DataSet file={file!r}> has no (finite) 'timestep' attribute")
        entries.append((t, ds.get("part", "0"), path.parent / file))
    if not entries:
        raise ValueError(f"{path}: the collection has no <DataSet> entries")
    parts = sorted({p for _, p, _ in entries})
    if len(parts) > 1:
        raise ValueError(f"{path}: the collection has several parts per time step (part={parts}): only one piece "
                         "per step is supported; merge the pieces (ParaView's Merge Blocks) and save again")
    entries.sort(key=lambda e: e[0])  # stable: file order among equal times, which are refused next
    for (t0, _, f0), (t1, _, f1) in zip(entries, entries[1:]):
        if t0 == t1:
            raise ValueError(f"{path}: two steps at timestep {t0!r}: {f0.name} and {f1.name}")
    missing = [str(f) for _, _, f in entries if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"{path}: {len(missing)} step files of the collection are missing: {missing[:5]}")
    return [(t, f) for t, _, f in entries]


def read_pvd(path: PathLike, fields: StaticSpec = None, static: StaticSpec = None) -> Trajectory:
    """A ParaView collection ``CASE.pvd`` of step files (``<DataSet timestep=... file=...>``).

    Args:
        path: the ``.pvd`` file; step file names are relative to its folder.
        fields: point fields to read (default: every field of the first step, less reader bookkeeping).
        static: fields that do not change (checked); default ``None``: every field equal at all steps.

    Returns:
        :class:`Trajectory` ordered by timestep, times from the ``timestep`` attributes, named after
        the ``.pvd``.

    Raises:
        ValueError: steps with different meshes, a missing field, a single step, several parts per
            step, repeated timesteps. FileNotFoundError: a step file is missing.
    """
    path = Path(path)
    entries = _pvd_entries(path)
    labels = [f"step {i} ({f.name})" for i, (_, f) in enumerate(entries)]
    return _from_meshes([f for _, f in entries], [t for t, _ in entries], labels, fields, static, path, path.stem)


# ---- XDMF time series ----------------------------------------------------------------------------

def _meshio_cells(blocks) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """Volume and boundary cells of meshio cell blocks (blocks of one type concatenated)."""
    by_type: Dict[str, List[np.ndarray]] = {}
    for b in blocks:
        by_type.setdefault(b.type, []).append(np.asarray(b.data, dtype=np.int64))
    cells = {t: np.concatenate(c) for t, c in by_type.items()}
    top = max((topological_dim(t) for t in cells if topological_dim(t) >= 1), default=None)
    volume = {t: c for t, c in cells.items() if top is not None and topological_dim(t) == top}
    return volume, {t: c for t, c in cells.items() if t not in volume}


def read_xdmf_series(path: PathLike, fields: StaticSpec = None, static: StaticSpec = None) -> Trajectory:
    """An XDMF time series (one mesh, a temporal collection of steps), through meshio's
    ``TimeSeriesReader``.

    Args:
        path: the ``.xdmf`` / ``.xmf`` file (HDF5-backed data needs ``h5py``).
        fields, static: as :func:`read_pvd`.

    Returns:
        :class:`Trajectory` with the steps' ``<Time>`` values as times.

    Raises:
        ValueError: not a time series, a step that defines another mesh, a missing field, a single step.
    """
    import meshio
    from meshio.xdmf import TimeSeriesReader

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"XDMF file not found: {path}")
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured), \
                TimeSeriesReader(path) as reader:
            points, blocks = reader.read_points_cells()
            mesh_xml = {c.tag: ET.tostring(c) for c in reader.mesh_grid if c.tag in ("Geometry", "Topology")}
            steps = []
            for k in range(reader.num_steps):
                for c in reader.collection[k]:
                    if c.tag in mesh_xml and ET.tostring(c) != mesh_xml[c.tag]:
                        raise ValueError(f"steps with different meshes: step {k} of {path} defines its own "
                                         f"<{c.tag}> (a trajectory has one mesh for every step)")
                steps.append(reader.read_data(k)[:2])
    except ModuleNotFoundError as exc:
        require(exc.name or str(exc), f"reading {path.name}")
        raise
    except (meshio.ReadError, ET.ParseError, KeyError, AssertionError) as exc:
        raise ValueError(f"{path}: not an XDMF time series meshio can read ({type(exc).__name__}: {exc}); a "
                         "single-mesh .xdmf is read with meshshard.read_mesh") from exc
    points = np.asarray(points, dtype=np.float64)
    volume, boundary = _meshio_cells(blocks)
    top = max((topological_dim(t) for t in volume), default=None)
    if points.ndim == 2 and points.shape[1] == 3 and (top is None or top <= 2) and not points[:, 2].any():
        points = points[:, :2]
    from meshshard.io.mesh import Mesh

    labels = [f"step {k} (time {t!r})" for k, (t, _) in enumerate(steps)]
    meshes = [Mesh(points, cells=volume, boundary_cells=boundary, point_data=pd) for _, pd in steps]
    return _from_meshes(meshes, [t for t, _ in steps], labels, fields, static, path, path.stem)


# ---- a folder of numbered step files -------------------------------------------------------------

def list_step_files(folder: PathLike, pattern: Optional[str] = None) -> List[Path]:
    """The numbered step files of a folder in natural order (``step_2`` before ``step_10``).

    Args:
        folder: the folder.
        pattern: a glob (``"step_*.vtu"``) choosing the files; default: every mesh file whose name ends
            in a number before its suffix, which must all share one prefix and suffix.

    Returns:
        the paths, ordered by the number in their names.

    Raises:
        ValueError: files of several series (the message lists them; pass ``pattern``), a file
            without a number, two files with the same number.
    """
    folder = Path(folder)
    suffixes = set(supported_suffixes())
    if pattern is not None:
        files = [p for p in folder.glob(pattern) if p.is_file() and not p.name.startswith(".")]
    else:
        files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                 and any(p.name.lower().endswith(s) for s in suffixes)]
    groups: Dict[Tuple[str, str], List[Tuple[int, Path]]] = {}
    for p in files:
        m = _NUMBERED.match(p.name)
        if m is None:
            if pattern is not None:
                raise ValueError(f"{p}: matches {pattern!r} but has no step number before its suffix")
            continue
        groups.setdefault((m["prefix"], m["suffix"]), []).append((int(m["num"]), p))
    if len(groups) > 1:
        desc = ", ".join(f"{pre}<n>{suf} ({len(v)} files)" for (pre, suf), v in sorted(groups.items()))
        raise ValueError(f"{folder}: numbered files of several series: {desc}; choose one with pattern=, "
                         "e.g. pattern='step_*.vtu'")
    items = sorted(next(iter(groups.values()), []), key=lambda e: (e[0], e[1].name))
    for (n0, p0), (n1, p1) in zip(items, items[1:]):
        if n0 == n1:
            raise ValueError(f"{folder}: {p0.name} and {p1.name} have the same step number {n0}")
    return [p for _, p in items]


def read_step_files(folder: PathLike, pattern: Optional[str] = None, fields: StaticSpec = None,
                    static: StaticSpec = None) -> Trajectory:
    """A folder of numbered step files (``step_0000.vtu``, ``step_0001.vtu``, ...; any format
    :func:`meshshard.read_mesh` reads), in natural order.

    Args:
        folder: the folder.
        pattern: a glob choosing the step files (see :func:`list_step_files`).
        fields, static: as :func:`read_pvd`.

    Returns:
        :class:`Trajectory` whose times are the numbers in the file names, named after the folder.

    Raises:
        ValueError: as :func:`list_step_files`, steps with different meshes, a missing field, a single step.
    """
    folder = Path(folder)
    files = list_step_files(folder, pattern)
    times = [float(_NUMBERED.match(p.name)["num"]) for p in files]
    labels = [f"step {i} ({p.name})" for i, p in enumerate(files)]
    return _from_meshes(files, times, labels, fields, static, folder, folder.name)


# ---- entry points --------------------------------------------------------------------------------

def _layout(path: Path, pattern: Optional[str]) -> Tuple[str, Path]:
    """(kind, path to read) for ``path``: 'pvd', 'xdmf', 'mgn' or 'steps'."""
    if not path.exists():
        raise FileNotFoundError(f"trajectory not found: {path}")
    suffix = path.suffix.lower()
    if path.is_file():
        kinds = {".pvd": "pvd", ".xdmf": "xdmf", ".xmf": "xdmf", ".tfrecord": "mgn"}
        if suffix in kinds:
            return kinds[suffix], path
        raise ValueError(f"unknown trajectory layout: {path} is a single file of suffix {suffix or '(none)'!r}. A "
                         f"trajectory is {_LAYOUTS}")
    if pattern is not None:
        return "steps", path
    if is_meshgraphnets_dir(path):
        return "mgn", path
    pvds = sorted(path.glob("*.pvd"))
    if len(pvds) == 1:
        return "pvd", pvds[0]
    if len(pvds) > 1:
        raise ValueError(f"{path} holds several ParaView collections {[p.name for p in pvds]}: pass one of them")
    if list_step_files(path):
        return "steps", path
    have = sorted(p.name for p in path.iterdir())[:10]
    raise ValueError(f"unknown trajectory layout: {path} is a folder without a .pvd, meta.json + .tfrecord, or "
                     f"numbered step files (it holds {have}). A trajectory is {_LAYOUTS}")


def read_trajectory(path: PathLike, fields: StaticSpec = None, static: StaticSpec = None, *, index: int = 0,
                    split: str = "train", pattern: Optional[str] = None, verify: bool = True) -> Trajectory:
    """Read one trajectory (one mesh, point fields over time steps), the reader chosen by what ``path`` is.

    - ``CASE.pvd``: a ParaView collection (:func:`read_pvd`);
    - ``CASE.xdmf`` / ``.xmf``: an XDMF time series (:func:`read_xdmf_series`);
    - a folder with one ``.pvd``: that collection;
    - a folder with ``meta.json`` and ``<split>.tfrecord``, or such a ``.tfrecord`` file: a
      MeshGraphNets dataset (:func:`meshshard.io.read_meshgraphnets`), trajectory ``index``;
    - a folder of numbered mesh files ``step_0000.vtu``, ...: its steps in natural order
      (:func:`read_step_files`).

    Args:
        path: the file or folder.
        fields: point fields to read (default: all).
        static: fields that do not change, for the VTK/XDMF layouts (default: every field equal
            at all steps); a MeshGraphNets ``meta.json`` says which are static itself.
        index: the trajectory of a MeshGraphNets split.
        split: the MeshGraphNets split when ``path`` is its folder.
        pattern: a glob choosing the step files of a folder (makes ``path`` a step-file folder).
        verify: check TFRecord CRCs.

    Returns:
        :class:`Trajectory`: ``points`` [N, d], ``cells``, ``fields`` {name: [T, N, F]},
        ``static`` {name: [N, F]}, ``times`` [T].

    Raises:
        FileNotFoundError: ``path`` does not exist. ValueError: an unknown layout (the message
        lists the layouts), steps with different meshes, missing fields, a single step.
    """
    path = Path(path)
    kind, target = _layout(path, pattern)
    if kind == "mgn":
        if static is not None:
            raise ValueError("static= does not apply to a MeshGraphNets dataset: its meta.json says which fields are "
                             "static")
        return read_meshgraphnets(target, split=split, index=index, fields=fields, verify=verify)
    if index != 0:
        raise IndexError(f"{path} holds one trajectory; index={index} applies to MeshGraphNets datasets")
    if kind == "pvd":
        return read_pvd(target, fields, static)
    if kind == "xdmf":
        return read_xdmf_series(target, fields, static)
    return read_step_files(target, pattern, fields, static)


def iter_trajectories(path: PathLike, fields: StaticSpec = None, static: StaticSpec = None, *, split: str = "train",
                      pattern: Optional[str] = None, verify: bool = True) -> Iterator[Trajectory]:
    """Every trajectory at ``path``: each record of a MeshGraphNets split, or the one trajectory of
    the other layouts.

    Args:
        path, fields, static, split, pattern, verify: as :func:`read_trajectory`.

    Yields:
        :class:`Trajectory`, one in memory at a time.
    """
    path = Path(path)
    kind, target = _layout(path, pattern)
    if kind == "mgn":
        if static is not None:
            raise ValueError("static= does not apply to a MeshGraphNets dataset: its meta.json says which fields are "
                             "static")
        yield from iter_meshgraphnets(target, split=split, fields=fields, verify=verify)
    else:
        yield read_trajectory(path, fields, static, pattern=pattern, verify=verify)
