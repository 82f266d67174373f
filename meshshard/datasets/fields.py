"""A mesh's training tensors: node features and targets (point fields picked by name, see
:mod:`meshshard.io.fields`), node types, edge features, and its PyG ``Data``.

The field selection (:func:`parse_field`, :func:`select_fields`, ...) and the mesh's graph
(:func:`meshshard.io.mesh_graph`) live in :mod:`meshshard.io`; the field functions are re-exported
here, where training code looks for them.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence

import numpy as np
import torch

from meshshard.io.fields import POSITION_FIELD, check_fields, field_columns, parse_field, select_fields
from meshshard.io.graph import DEFAULT_KNN, mesh_graph as _mesh_graph

__all__ = ["parse_field", "check_fields", "field_columns", "select_fields", "node_type_ids", "edge_features",
           "mesh_to_data", "mesh_arrays", "POSITION_FIELD", "DEFAULT_KNN"]


def __getattr__(name: str):
    if name == "mesh_graph":  # moved to meshshard.io (layer 1), where the graph of a mesh is built
        import warnings

        warnings.warn("mesh_graph moved from meshshard.datasets to meshshard.io; import meshshard.io.mesh_graph",
                      DeprecationWarning, stacklevel=2)
        return _mesh_graph
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        edge_index = _mesh_graph(mesh, knn)
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
        edge_index: the graph; default :func:`meshshard.io.mesh_graph` (element edges, or kNN for a point cloud).
        dtype: floating dtype of ``pos``, ``x``, ``y``, ``edge_attr``, ``node_type``.
        knn: neighbours per point when the mesh is a point cloud.

    Returns:
        ``Data(pos [N,d], x [N,F], y [N,T], edge_index [2,E], edge_attr [E,d+1],
        node_type [N, len(node_types)+1] one-hot)``.
    """
    from torch_geometric.data import Data

    return Data(**mesh_arrays(mesh, features, targets, node_types, edge_index, dtype, knn))
