"""Pick node features and targets out of a mesh's point data by name, and build its PyG ``Data``."""
from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ["parse_field", "check_fields", "field_columns", "select_fields", "node_type_ids", "edge_features", "mesh_graph", "mesh_to_data",
           "mesh_arrays", "POSITION_FIELD", "DEFAULT_KNN"]

POSITION_FIELD = "pos"
DEFAULT_KNN = 8  # neighbours per point of a point cloud (a file without cells)
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


def check_fields(files: Sequence, features: Sequence[str], targets: Sequence[str]) -> None:
    """Check that every file has every named point field, before any work is done on them.

    Reads only what :func:`meshshard.io.point_field_names` needs (a ``.vtu``'s header, a
    ``.npz``'s member names); ``pos`` is always there.

    Args:
        files: mesh file paths.
        features: field specs of the node inputs (see :func:`parse_field`).
        targets: field specs of the targets.

    Raises:
        ValueError: one message listing, per file that lacks some, every missing field and the
            fields that file has.
    """
    from meshshard.io import point_field_names

    wanted = [(parse_field(spec)[0], role) for role, specs in (("features", features), ("targets", targets))
              for spec in specs]
    if not wanted:
        return
    lines = []
    for f in files:
        have = set(point_field_names(f)) | {POSITION_FIELD}
        missing = sorted({f"{name!r} not found ({role})" for name, role in wanted if name not in have})
        if missing:
            lines.append(f"  {f}: {'; '.join(missing)}; available: {sorted(have)}")
    if lines:
        raise ValueError(f"point fields missing in {len(lines)} of {len(files)} input files (nothing was "
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


def node_type_ids(mesh, node_types: Sequence[str]) -> torch.Tensor:
    """Node type per node: ``0`` interior, ``k + 1`` for a node in set ``node_types[k]``.

    A node in several sets gets the first listed one. Sets the mesh does not have are skipped.

    Args:
        mesh: a :class:`meshshard.io.Mesh` (its ``node_sets``).
        node_types: node-set names in type order.

    Returns:
        LongTensor ``[N]``.
    """
    ids = torch.zeros(mesh.num_nodes, dtype=torch.long)
    # Assign in reverse so that the first listed set wins.
    for k in range(len(node_types) - 1, -1, -1):
        nodes = mesh.node_sets.get(node_types[k])
        if nodes is not None and nodes.numel():
            ids[nodes] = k + 1
    return ids


def edge_features(pos: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
    """MeshGraphNet's edge features: ``pos[src] - pos[dst]`` and its Euclidean norm.

    Args:
        pos: node coordinates ``[N, d]``.
        edge_index: ``[2, E]``, row 0 source, row 1 target.

    Returns:
        ``[E, d + 1]`` in ``pos``'s dtype.
    """
    rel = pos[edge_index[0]] - pos[edge_index[1]]
    return torch.cat([rel, rel.norm(dim=1, keepdim=True)], dim=1)


def mesh_graph(mesh, knn: int = DEFAULT_KNN) -> torch.Tensor:
    """The node graph of a mesh: its element edges, or for a point cloud (no cells) the ``knn``
    nearest neighbours of every point (:func:`meshshard.io.knn_graph`, directed: row 0 the
    neighbour, row 1 the point).

    Args:
        mesh: :class:`meshshard.io.Mesh`.
        knn: neighbours per point, used only when the mesh has no cells.

    Returns:
        LongTensor ``[2, E]``.
    """
    if not mesh.is_point_cloud:
        return mesh.edge_index()
    from meshshard.io import knn_graph

    try:  # knn_graph checks k; the message gains the file it is about
        return knn_graph(mesh.points, knn)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{mesh.source or 'point cloud'}: knn: {exc}") from exc


def mesh_arrays(mesh, features: Sequence[str], targets: Sequence[str], node_types: Sequence[str] = (),
                edge_index: Optional[torch.Tensor] = None, dtype: torch.dtype = torch.float32,
                knn: int = DEFAULT_KNN) -> Dict[str, torch.Tensor]:
    """The tensors of :func:`mesh_to_data` as a plain dict (no PyG import: cheap in worker processes).

    Args:
        mesh, features, targets, node_types, edge_index, dtype, knn: as :func:`mesh_to_data`.

    Returns:
        ``{"pos": [N, d], "x": [N, F], "y": [N, T], "edge_index": [2, E], "edge_attr": [E, d + 1],
        "node_type": [N, len(node_types) + 1]}``.
    """
    if edge_index is None:
        edge_index = mesh_graph(mesh, knn)
    pos = torch.as_tensor(np.asarray(mesh.points, dtype=np.float64))
    x = torch.as_tensor(select_fields(mesh, features))
    y = torch.as_tensor(select_fields(mesh, targets))
    ea = edge_features(pos, edge_index)  # in float64, so float32 data is a rounding of exact values
    nt = torch.nn.functional.one_hot(node_type_ids(mesh, node_types), len(node_types) + 1)
    return dict(pos=pos.to(dtype), x=x.to(dtype), y=y.to(dtype), edge_index=edge_index,
                edge_attr=ea.to(dtype), node_type=nt.to(dtype))


def mesh_to_data(mesh, features: Sequence[str], targets: Sequence[str], node_types: Sequence[str] = (),
                 edge_index: Optional[torch.Tensor] = None, dtype: torch.dtype = torch.float32,
                 knn: int = DEFAULT_KNN):
    """A mesh with point fields as a PyG ``Data``.

    Args:
        mesh: :class:`meshshard.io.Mesh`.
        features: field specs for ``x``.
        targets: field specs for ``y``.
        node_types: node-set names (in order) that become node types 1, 2, ...
        edge_index: the graph; default :func:`mesh_graph` (element edges, or kNN for a point cloud).
        dtype: floating dtype of ``pos``, ``x``, ``y``, ``edge_attr``, ``node_type``.
        knn: neighbours per point when the mesh is a point cloud.

    Returns:
        ``Data(pos [N,d], x [N,F], y [N,T], edge_index [2,E], edge_attr [E,d+1],
        node_type [N, len(node_types)+1] one-hot)``.
    """
    from torch_geometric.data import Data

    return Data(**mesh_arrays(mesh, features, targets, node_types, edge_index, dtype, knn))
