"""Point fields of a mesh picked by name: ``"pressure"``, ``"velocity[0,1]"``, ``"pos"``.

The field specs of training (features, targets), of ``meshshard predict``'s output and of the
field plots all go through these functions, so a spec means the same columns everywhere.
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["parse_field", "check_fields", "field_columns", "select_fields", "POSITION_FIELD"]

POSITION_FIELD = "pos"
_SPEC = re.compile(r"^\s*([^\[\]]+?)\s*(?:\[\s*([0-9,\s]+)\s*\])?\s*$")


def parse_field(spec: str) -> Tuple[str, Optional[List[int]]]:
    """Split ``"velocity"`` / ``"velocity[0,1]"`` into ``("velocity", None)`` / ``("velocity", [0, 1])``.

    A bare name takes every column of the field (a vector field ``[N, 3]`` gives three columns);
    ``name[i,j]`` takes only those components. The name ``pos`` means the node coordinates
    unless the file has a point field called ``pos``.

    Args:
        spec: ``"name"`` or ``"name[i,j,...]"``.

    Returns:
        ``(name, component list or None)``.
    """
    if not isinstance(spec, str):
        raise TypeError(f"a field must be given by name (str), got {type(spec).__name__}")
    m = _SPEC.match(spec)
    if not m:
        raise ValueError(f"bad field spec {spec!r}: use 'name' or 'name[i,j,...]'")
    name, comps = m.group(1), m.group(2)
    if comps is None:
        return name, None
    idx = [int(c) for c in comps.split(",") if c.strip()]
    if not idx:
        raise ValueError(f"bad field spec {spec!r}: empty component list")
    return name, idx


def check_fields(files: Sequence, features: Sequence[str], targets: Sequence[str], nodes: str = "points") -> None:
    """Check that every file has every named point field, before any work is done on them.

    Reads only what :func:`meshshard.io.point_field_names` needs (a ``.vtu``'s header, a
    ``.npz``'s member names); ``pos`` is always there.

    Args:
        files: mesh file paths.
        features: field specs of the node inputs (see :func:`parse_field`).
        targets: field specs of the targets.
        nodes: ``"cells"`` to check the cell fields (the node fields of
            ``read_mesh(path, nodes="cells")``).

    Raises:
        ValueError: one message listing, per file that lacks some, every missing field and the
            fields that file has.
    """
    from meshshard.io.read import point_field_names

    wanted = [(parse_field(spec)[0], role) for role, specs in (("features", features), ("targets", targets))
              for spec in specs]
    if not wanted:
        return
    lines = []
    for f in files:
        have = set(point_field_names(f, nodes=nodes)) | {POSITION_FIELD}
        missing = sorted({f"{name!r} not found ({role})" for name, role in wanted if name not in have})
        if missing:
            lines.append(f"  {f}: {'; '.join(missing)}; available: {sorted(have)}")
    if lines:
        what = "cell fields (nodes = cells)" if nodes == "cells" else "point fields"
        raise ValueError(f"{what} missing in {len(lines)} of {len(files)} input files (nothing was "
                         "written):\n" + "\n".join(lines))


def _field_array(mesh, name: str) -> np.ndarray:
    if name in mesh.point_data:
        arr = np.asarray(mesh.point_data[name])
    elif name == POSITION_FIELD:
        arr = np.asarray(mesh.points)
    else:
        have = sorted(mesh.point_data) + [POSITION_FIELD]
        src = f" in {mesh.source}" if getattr(mesh, "source", None) else ""
        raise ValueError(f"point field {name!r} not found{src}; available: {have}")
    if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
        raise TypeError(f"point field {name!r} has non-numeric dtype {arr.dtype}")
    return arr.reshape(arr.shape[0], -1)


def field_columns(mesh, specs: Sequence[str]) -> List[str]:
    """Column names of :func:`select_fields` (``velocity_0, velocity_1, pressure``).

    Args:
        mesh: a :class:`meshshard.io.Mesh`.
        specs: field specs (see :func:`parse_field`).

    Returns:
        one name per column.
    """
    names: List[str] = []
    for spec in specs:
        name, comps = parse_field(spec)
        arr = _field_array(mesh, name)
        cols = range(arr.shape[1]) if comps is None else comps
        names += [name if arr.shape[1] == 1 and comps is None else f"{name}_{c}" for c in cols]
    return names


def select_fields(mesh, specs: Sequence[str]) -> np.ndarray:
    """Concatenate the named point fields of ``mesh`` column-wise.

    Args:
        mesh: a :class:`meshshard.io.Mesh`.
        specs: field specs (see :func:`parse_field`).

    Returns:
        float64 array ``[N, C]`` (``C = 0`` for no specs).
    """
    cols = [np.zeros((mesh.num_nodes, 0))]
    for spec in specs:
        name, comps = parse_field(spec)
        arr = _field_array(mesh, name)
        if comps is not None:
            bad = [c for c in comps if c >= arr.shape[1]]
            if bad:
                raise ValueError(f"field {name!r} has {arr.shape[1]} components; {spec!r} asks for {bad}")
            arr = arr[:, comps]
        cols.append(arr.astype(np.float64))
    out = np.concatenate(cols, axis=1)
    if not np.isfinite(out).all():
        raise ValueError(f"fields {list(specs)} hold non-finite values")
    return out


