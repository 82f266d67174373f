"""Shared test data for graph / sharded message-passing tests: real meshes and their partitions."""
from __future__ import annotations

from pathlib import Path

import torch

METHODS = ("kdtree", "morton", "hilbert", "graph")


def load_graph(data_dir, name: str = "naca0012_inviscid.su2"):
    """``(points float64 [N, d], edge_index [2, E])`` of a real mesh (both edge directions)."""
    import meshshard as ms

    mesh = ms.read_mesh(Path(data_dir) / name)
    return torch.as_tensor(mesh.points, dtype=torch.float64), mesh.edge_index()


def knn_edges(points, k: int = 6):
    """A directed kNN graph (in-degree k, uneven out-degree) on real points."""
    import meshshard as ms

    return ms.knn_graph(points, k, workers=1)


def make_partition(points, edge_index, num_parts: int, method: str):
    """A partition from meshshard's partitioners (uneven sizes in general)."""
    import meshshard.partitioners as partitioners

    partition = getattr(partitioners, "partition", None)
    if not callable(partition):  # TEMPORARY until the partitioners land: uneven coordinate slabs
        from meshshard.partitioners import Partition

        axis = METHODS.index(method) % points.shape[1]
        order = torch.argsort(points[:, axis], stable=True)
        w = torch.arange(1, num_parts + 1, dtype=torch.float64)
        cuts = (torch.cumsum(w, 0) / w.sum() * points.shape[0]).long()
        assign = torch.empty(points.shape[0], dtype=torch.long)
        assign[order] = torch.searchsorted(cuts, torch.arange(points.shape[0]), right=True).clamp(max=num_parts - 1)
        return Partition(assign, num_parts, method=method)
    return partition(points, num_parts, method=method, edge_index=edge_index)
