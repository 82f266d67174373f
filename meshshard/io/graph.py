"""The node graph of a mesh: its element edges, or the kNN graph of a point cloud (no cells)."""
from __future__ import annotations

import torch

from meshshard.io.knn import knn_graph

__all__ = ["mesh_graph", "mesh_graph_info", "DEFAULT_KNN"]

DEFAULT_KNN = 8  # neighbours per point of a point cloud (a file without cells)


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
    try:  # knn_graph checks k; the message gains the file it is about
        return knn_graph(mesh.points, knn)
    except (ValueError, TypeError) as exc:
        raise type(exc)(f"{mesh.source or 'point cloud'}: knn: {exc}") from exc


def mesh_graph_info(mesh, knn: int = DEFAULT_KNN) -> dict:
    """Which graph :func:`mesh_graph` builds for ``mesh``, as recorded in a shard folder's ``meta.json``.

    Args:
        mesh: :class:`meshshard.io.Mesh`.
        knn: neighbours per point, used only when the mesh has no cells.

    Returns:
        ``{"graph": "knn", "knn_k": knn}`` for a point cloud; for a cell-centred mesh
        (``mesh.nodes == "cells"``) ``{"graph": "cell_faces", "nodes": "cells", "cell_types":
        [...]}`` (cells joined through shared faces, the sorted cell types of the mesh they came
        from); else ``{"graph": "mesh_edges", "cell_types": [...]}`` (the sorted volume cell types,
        ``"polyhedron"`` among them when the mesh has polyhedra).
    """
    if mesh.is_point_cloud:
        return {"graph": "knn", "knn_k": knn}
    if getattr(mesh, "nodes", "points") == "cells":
        base = mesh.vertex_mesh
        return {"graph": "cell_faces", "nodes": "cells", "cell_types": sorted(base.cell_counts()) if base is not None else []}
    return {"graph": "mesh_edges", "cell_types": sorted(mesh.cell_counts())}
