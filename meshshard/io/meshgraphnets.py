"""The MeshGraphNets dataset layout (Pfaff et al., 2021), read without TensorFlow.

A dataset folder holds ``meta.json`` and one TFRecord file per split (``train.tfrecord``,
``valid.tfrecord``, ``test.tfrecord``); each record is a ``tf.train.Example`` holding one
trajectory, every field as the raw little-endian bytes of one array. ``meta.json`` describes them::

    {"field_names": ["cells", "mesh_pos", "node_type", "velocity", "pressure"],
     "features": {"cells":     {"type": "static",  "shape": [1, -1, 3],   "dtype": "int32"},
                  "mesh_pos":  {"type": "static",  "shape": [1, -1, 2],   "dtype": "float32"},
                  "node_type": {"type": "static",  "shape": [1, -1, 1],   "dtype": "int32"},
                  "velocity":  {"type": "dynamic", "shape": [600, -1, 2], "dtype": "float32"},
                  "pressure":  {"type": "dynamic", "shape": [600, -1, 1], "dtype": "float32"}},
     "trajectory_length": 600, "dt": 0.01}

``mesh_pos`` gives the points and ``cells`` the elements (triangles, or tetrahedra for the 3D
datasets); the other static fields become :attr:`Trajectory.static` ``[N, F]`` and the dynamic
ones :attr:`Trajectory.fields` ``[T, N, F]``. ``node_type`` holds the codes of
:data:`MESHGRAPHNETS_NODE_TYPES`. Remeshed datasets (``dynamic_varlen`` fields: the mesh changes
between steps) are refused.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from meshshard.io.tfrecord import TFRecordError, parse_example, read_tfrecord_at, tfrecord_index
from meshshard.io.trajectory import Trajectory

__all__ = ["MESHGRAPHNETS_NODE_TYPES", "read_meshgraphnets_meta", "meshgraphnets_files", "count_meshgraphnets",
           "read_meshgraphnets", "iter_meshgraphnets", "is_meshgraphnets_dir"]

PathLike = Union[str, os.PathLike]

#: node type name -> code, as MeshGraphNets' ``common.NodeType`` (the ``node_type`` field holds the codes)
MESHGRAPHNETS_NODE_TYPES = {"normal": 0, "obstacle": 1, "airfoil": 2, "handle": 3, "inflow": 4, "outflow": 5,
                            "wall_boundary": 6}

_POSITION = "mesh_pos"
_CELLS = "cells"
_KINDS = ("static", "dynamic")


def is_meshgraphnets_dir(path: PathLike) -> bool:
    """Whether ``path`` is a folder with a ``meta.json`` and at least one ``.tfrecord`` file.

    Args:
        path: a folder.
    """
    path = Path(path)
    return path.is_dir() and (path / "meta.json").is_file() and any(path.glob("*.tfrecord"))


def meshgraphnets_files(path: PathLike, split: str = "train") -> Tuple[Path, Path]:
    """The ``meta.json`` and the TFRecord file of one split.

    Args:
        path: the dataset folder, or one of its ``.tfrecord`` files (then ``split`` is ignored).
        split: ``train``, ``valid``, ``test`` (any ``<split>.tfrecord`` of the folder).

    Returns:
        ``(meta.json path, tfrecord path)``.

    Raises:
        FileNotFoundError: no ``meta.json`` beside the records, or no such split (the message lists
            the splits there are).
    """
    path = Path(path)
    if path.is_file():
        folder, record = path.parent, path
    else:
        folder, record = path, path / f"{split}.tfrecord"
    meta = folder / "meta.json"
    if not meta.is_file():
        raise FileNotFoundError(f"MeshGraphNets dataset {folder}: no meta.json beside the .tfrecord files (it "
                                "describes the fields)")
    if not record.is_file():
        have = sorted(p.stem for p in folder.glob("*.tfrecord"))
        raise FileNotFoundError(f"MeshGraphNets dataset {folder}: no split {split!r} ({record.name}); splits: {have}")
    return meta, record


def read_meshgraphnets_meta(path: PathLike) -> dict:
    """Read and check a MeshGraphNets ``meta.json``.

    Args:
        path: the ``meta.json`` file.

    Returns:
        the dict, with ``field_names`` filled in from ``features`` where absent.

    Raises:
        ValueError: not a MeshGraphNets description (the message names the first problem), a field of
            a type other than ``static`` / ``dynamic`` (``dynamic_varlen``: the mesh changes between steps).
    """
    path = Path(path)
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable JSON file ({exc})") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("features"), dict):
        hint = ""
        if isinstance(meta, dict) and "sequence_length" in meta:
            hint = (" (it looks like the Learning-to-Simulate particle format, SequenceExample records: not "
                    "supported)")
        raise ValueError(f"{path}: not a MeshGraphNets meta.json: no 'features' object{hint}")
    feats = meta["features"]
    for name, f in feats.items():
        if not isinstance(f, dict) or not {"type", "shape", "dtype"} <= set(f):
            raise ValueError(f"{path}: feature {name!r} needs 'type', 'shape' and 'dtype', got {f!r}")
        if f["type"] == "dynamic_varlen":
            raise ValueError(f"{path}: feature {name!r} is 'dynamic_varlen': this dataset is remeshed, the steps "
                             "have different meshes, which a Trajectory (one mesh for every step) cannot hold")
        if f["type"] not in _KINDS:
            raise ValueError(f"{path}: feature {name!r} has type {f['type']!r}; expected one of {list(_KINDS)}")
        shape = f["shape"]
        if not isinstance(shape, list) or not all(isinstance(s, int) for s in shape) or len(shape) not in (2, 3) \
                or sum(s == -1 for s in shape) > 1:
            raise ValueError(f"{path}: feature {name!r} has shape {shape!r}; expected 2 or 3 integers, at most one -1")
        try:
            np.dtype(f["dtype"])
        except TypeError as exc:
            raise ValueError(f"{path}: feature {name!r} has an unknown dtype {f['dtype']!r}") from exc
    meta.setdefault("field_names", list(feats))
    missing = [n for n in meta["field_names"] if n not in feats]
    if missing:
        raise ValueError(f"{path}: field_names {missing} have no entry in 'features'")
    if _POSITION not in feats:
        raise ValueError(f"{path}: no {_POSITION!r} feature (the node coordinates); features: {sorted(feats)}")
    length = meta.get("trajectory_length")
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"{path}: 'trajectory_length' must be a positive integer, got {length!r}")
    dt = meta.get("dt")
    if dt is not None and (not isinstance(dt, (int, float)) or not np.isfinite(dt) or dt <= 0):
        raise ValueError(f"{path}: 'dt' must be a positive number, got {dt!r}")
    return meta


def count_meshgraphnets(path: PathLike, split: str = "train", verify: bool = True) -> int:
    """Number of trajectories in a split (only the record headers are read).

    Args:
        path: the dataset folder, or one of its ``.tfrecord`` files.
        split: the split when ``path`` is the folder.
        verify: check the headers' CRCs.
    """
    _, record = meshgraphnets_files(path, split)
    return len(tfrecord_index(record, verify=verify))


def _decode(example: dict, name: str, spec: dict, where: str) -> np.ndarray:
    values = example.get(name)
    if values is None:
        raise ValueError(f"{where}: field {name!r} (in meta.json) is missing from the record; the record has "
                         f"{sorted(example)}")
    if not isinstance(values, list):
        raise ValueError(f"{where}: field {name!r} must be a bytes list (raw array bytes), got a "
                         f"{values.dtype} list")
    raw = b"".join(values)
    dtype = np.dtype(spec["dtype"]).newbyteorder("<")
    if len(raw) % dtype.itemsize:
        raise ValueError(f"{where}: field {name!r} has {len(raw)} bytes, not a whole number of {spec['dtype']}")
    arr = np.frombuffer(raw, dtype=dtype)
    shape = list(spec["shape"])
    known = int(np.prod([s for s in shape if s != -1]))
    if (-1 in shape and (known == 0 or arr.size % known)) or (-1 not in shape and arr.size != known):
        raise ValueError(f"{where}: field {name!r} has {arr.size} values, which do not fit meta.json's shape {shape}")
    return arr.reshape(shape).astype(np.dtype(spec["dtype"]).newbyteorder("="))


def _cell_type(width: int, dim: int) -> str:
    types = {2: "line", 3: "triangle", 4: "tetra" if dim == 3 else "quad", 8: "hexahedron"}
    if width not in types:
        raise ValueError(f"MeshGraphNets 'cells' with {width} nodes per cell: no known cell type")
    return types[width]


def _trajectory(example: dict, meta: dict, fields: Optional[Sequence[str]], where: str, source: Path,
                name: str) -> Trajectory:
    feats = meta["features"]
    wanted = [n for n in meta["field_names"] if n not in (_POSITION, _CELLS)] if fields is None else list(fields)
    unknown = [n for n in wanted if n not in feats]
    if unknown:
        raise ValueError(f"{where}: fields {unknown} are not in meta.json; it has {sorted(feats)}")
    pos = _decode(example, _POSITION, feats[_POSITION], where)
    if feats[_POSITION]["type"] != "static":
        raise ValueError(f"{where}: {_POSITION!r} must be static (one mesh for every step)")
    points = pos.reshape(-1, pos.shape[-1])
    cells = {}
    if _CELLS in feats:
        c = _decode(example, _CELLS, feats[_CELLS], where)
        if feats[_CELLS]["type"] != "static":
            raise ValueError(f"{where}: {_CELLS!r} is dynamic: the steps have different meshes, which a "
                             "Trajectory (one mesh for every step) cannot hold")
        c = c.reshape(-1, c.shape[-1])
        cells = {_cell_type(c.shape[1], points.shape[1]): c}
    length = meta["trajectory_length"]
    static, dynamic = {}, {}
    for key in wanted:
        arr = _decode(example, key, feats[key], where)
        if feats[key]["type"] == "static":
            if arr.ndim == 3:
                if arr.shape[0] != 1:
                    raise ValueError(f"{where}: static field {key!r} has shape {list(arr.shape)}; expected [1, N, F]")
                arr = arr[0]
            static[key] = arr
        else:
            if arr.ndim != 3 or arr.shape[0] != length:
                raise ValueError(f"{where}: dynamic field {key!r} has shape {list(arr.shape)}; expected "
                                 f"[trajectory_length={length}, N, F]")
            dynamic[key] = arr
    times = float(meta.get("dt") or 1) * np.arange(length, dtype=np.float64)
    try:
        return Trajectory(points, cells, fields=dynamic, static=static, times=times, source=source, name=name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def read_meshgraphnets(path: PathLike, split: str = "train", index: int = 0, fields: Optional[Sequence[str]] = None,
                       verify: bool = True) -> Trajectory:
    """One trajectory of a MeshGraphNets dataset.

    Args:
        path: the dataset folder (``meta.json`` + ``<split>.tfrecord``), or one ``.tfrecord`` file
            with ``meta.json`` beside it.
        split: the split when ``path`` is the folder.
        index: which trajectory (record) of the split, from 0; negative counts from the end.
        fields: names of the fields to read (default: all but ``mesh_pos`` and ``cells``, which
            always give the mesh).
        verify: check the records' CRCs.

    Returns:
        :class:`Trajectory` with points ``mesh_pos`` [N, d], the cells, static fields [N, F]
        (``node_type`` int32 [N, 1]), dynamic fields [T, N, F], times ``dt * arange(T)``
        (``arange(T)`` without ``dt``), named ``<split>_<index>``.

    Raises:
        IndexError: no such record. ValueError / TFRecordError: as the meta.json and record checks.
    """
    meta_path, record = meshgraphnets_files(path, split)
    meta = read_meshgraphnets_meta(meta_path)
    index_ = tfrecord_index(record, verify=verify)
    if not -len(index_) <= index < len(index_):
        raise IndexError(f"{record}: trajectory {index} out of range: the file holds {len(index_)}")
    index = index % len(index_)
    data = read_tfrecord_at(record, *index_[index], verify=verify)
    return _from_record(data, meta, fields, record, index)


def _from_record(data: bytes, meta: dict, fields, record: Path, index: int) -> Trajectory:
    where = f"{record} record {index}"
    try:
        example = parse_example(data)
    except TFRecordError as exc:
        raise TFRecordError(f"{where}: {exc}") from exc
    return _trajectory(example, meta, fields, where, record, f"{record.stem}_{index}")


def iter_meshgraphnets(path: PathLike, split: str = "train", fields: Optional[Sequence[str]] = None,
                       verify: bool = True) -> Iterator[Trajectory]:
    """Every trajectory of a split in file order, one in memory at a time.

    Args:
        path, split, fields, verify: as :func:`read_meshgraphnets`.

    Yields:
        :class:`Trajectory` per record.
    """
    meta_path, record = meshgraphnets_files(path, split)
    meta = read_meshgraphnets_meta(meta_path)
    for i, (offset, length) in enumerate(tfrecord_index(record, verify=verify)):
        yield _from_record(read_tfrecord_at(record, offset, length, verify=verify), meta, fields, record, i)

