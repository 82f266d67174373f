"""Integer node types taken from a field (as the MeshGraphNets datasets store them)."""
from __future__ import annotations

import numpy as np
import torch

from meshshard.io.mesh import Mesh

__all__ = ["node_type_from_field"]


def node_type_from_field(mesh: Mesh, field: str) -> torch.Tensor:
    """The integer node type of every node, read from a point field or a cell field.

    Args:
        mesh: a :class:`Mesh`.
        field: a ``point_data`` name (its value per node), else a ``cell_data`` name: a node then
            takes the largest type among the volume cells that hold it (boundary types are the
            larger numbers in the MeshGraphNets convention, ``0`` normal).

    Returns:
        LongTensor [N] of non-negative types.

    Raises:
        KeyError: no point or cell field of that name (the message lists the fields there are).
        ValueError: the field has several columns, or values that are not non-negative integers.
    """
    if field in mesh.point_data:
        values, where = np.asarray(mesh.point_data[field]), "point"
    elif field in mesh.cell_data:
        values, where = np.asarray(mesh.cell_data[field]), "cell"
    else:
        raise KeyError(f"{mesh.source or 'the mesh'} has no point or cell field {field!r} for node types; "
                       f"point fields: {sorted(mesh.point_data)}, cell fields: {sorted(mesh.cell_data)}")
    if values.ndim == 2 and values.shape[1] == 1:
        values = values[:, 0]
    if values.ndim != 1:
        raise ValueError(f"node type field {field!r} must have one column, got shape {values.shape}")
    if not np.issubdtype(values.dtype, np.number) or np.issubdtype(values.dtype, np.complexfloating):
        raise ValueError(f"node type field {field!r} must be numeric, got dtype {values.dtype}")
    as_int = values.astype(np.int64)
    if not np.array_equal(as_int, values) or (as_int < 0).any():
        bad = int(np.flatnonzero((as_int != values) | (as_int < 0))[0])
        raise ValueError(f"node type field {field!r} must hold non-negative integers; row {bad} is {values[bad]}")
    if where == "point":
        return torch.from_numpy(as_int.copy())
    out = np.zeros(mesh.num_nodes, dtype=np.int64)
    at = 0
    for conn in mesh.cells.values():
        per_cell = np.repeat(as_int[at:at + len(conn)], conn.shape[1])
        np.maximum.at(out, conn.reshape(-1), per_cell)
        at += len(conn)
    if mesh.polyhedra is not None:
        cell, node = mesh.polyhedra.cell_nodes()
        np.maximum.at(out, node, as_int[at + cell])
    return torch.from_numpy(out)
